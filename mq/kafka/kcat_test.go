package kafka

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/mq"
)

// TestKcatGroup: kcat (librdkafka) produces to both partitions of a
// topic and reads them back as a balanced consumer group (librdkafka's
// own group protocol against the front end's coordinator), committing
// as it goes: the group's offsets in the pool then stand at the end of
// each partition's records.
func TestKcatGroup(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Skip("kcat is not installed (Debian package kcat)")
	}
	cat := startCatalog(t)
	_, addr := startServer(t, Config{Catalog: cat})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	l := testLayout
	l.Partitions = 2
	top, err := cat.Create(ctx, "events", l, mq.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for p := range 2 {
		var lines []string
		for i := range 40 {
			lines = append(lines, fmt.Sprintf("p%d-%02d", p, i))
		}
		want = append(want, lines...)
		prod := exec.CommandContext(ctx, kcat, "-b", addr, "-P", "-t", "events", "-p", fmt.Sprint(p))
		prod.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
		if out, err := prod.CombinedOutput(); err != nil {
			t.Fatalf("kcat -P: %v\n%s", err, out)
		}
	}
	out, err := exec.CommandContext(ctx, kcat, "-b", addr, "-G", "readers", "-X", "auto.offset.reset=earliest",
		"-e", "-q", "-f", "%p %s\n", "events").Output()
	if err != nil {
		t.Fatalf("kcat -G: %v\n%s", err, out)
	}
	var got []string
	perPart := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		p, v, _ := strings.Cut(line, " ")
		got = append(got, v)
		perPart[p] = append(perPart[p], v)
	}
	sort.Strings(got)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("kcat -G read %d records: %v", len(got), got)
	}
	for p, vs := range perPart {
		if !sort.StringsAreSorted(vs) {
			t.Errorf("partition %s out of order: %v", p, vs)
		}
	}
	for p := range 2 {
		st, _ := top.State(ctx, p)
		off, ok, err := top.GroupOffset(ctx, "readers", p)
		if err != nil || !ok || off > st.Committed || off/mq.Align*mq.Align >= st.Committed {
			t.Errorf("partition %d: group offset %d %v %v; log committed to %d", p, off, ok, err, st.Committed)
		}
	}
}
