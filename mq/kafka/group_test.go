package kafka

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ndma/ndma/mq"
)

// groupConn is a connection of a server whose coordinator alone is
// exercised: the catalog is never read.
func groupConn(t *testing.T, maxGroups, maxMembers int) *conn {
	t.Helper()
	s, err := New(Config{Catalog: &mq.Catalog{}, MaxGroups: maxGroups, MaxMembers: maxMembers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &conn{s: s, client: "test"}
}

func join(c *conn, group, member string) *kmsg.JoinGroupResponse {
	req := kmsg.NewPtrJoinGroupRequest()
	req.SetVersion(7)
	req.Group, req.MemberID, req.ProtocolType = group, member, "consumer"
	req.SessionTimeoutMillis, req.RebalanceTimeoutMillis = 3000, 5000
	req.Protocols = []kmsg.JoinGroupRequestProtocol{{Name: "range", Metadata: []byte(member)}}
	return c.joinGroup(req)
}

func syncAs(c *conn, group, member string, gen int32, assign map[string]string) *kmsg.SyncGroupResponse {
	req := kmsg.NewPtrSyncGroupRequest()
	req.Group, req.MemberID, req.Generation = group, member, gen
	for m, a := range assign {
		req.GroupAssignment = append(req.GroupAssignment, kmsg.SyncGroupRequestGroupAssignment{MemberID: m, MemberAssignment: []byte(a)})
	}
	return c.syncGroup(req)
}

func heartbeat(c *conn, group, member string, gen int32) int16 {
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.MemberID, req.Generation = group, member, gen
	return c.handleGroup(req).(*kmsg.HeartbeatResponse).ErrorCode
}

// TestCoordinator walks a group through Kafka's protocol: a first
// member leads generation 1; a second joining starts a rebalance that
// the first learns of by heartbeat and joins; the leader's assignments
// reach a follower waiting in SyncGroup; a stale generation, a leave,
// a session that runs out and the bounds on groups and members get
// Kafka's codes.
func TestCoordinator(t *testing.T) {
	c := groupConn(t, 1, 2)
	a := join(c, "g", "")
	if a.ErrorCode != 0 || a.Generation != 1 || a.LeaderID != a.MemberID || len(a.Members) != 1 {
		t.Fatalf("first join: %+v", a)
	}
	if r := syncAs(c, "g", a.MemberID, 1, map[string]string{a.MemberID: "p0,p1"}); r.ErrorCode != 0 || string(r.MemberAssignment) != "p0,p1" {
		t.Fatalf("leader's sync: %+v", r)
	}
	bDone := make(chan *kmsg.JoinGroupResponse, 1)
	go func() { bDone <- join(c, "g", "") }()
	deadline := time.Now().Add(10 * time.Second)
	for heartbeat(c, "g", a.MemberID, 1) != errRebalanceInProgress {
		if time.Now().After(deadline) {
			t.Fatal("the first member was not told of the rebalance")
		}
		time.Sleep(time.Millisecond)
	}
	a2 := join(c, "g", a.MemberID)
	b := <-bDone
	if a2.ErrorCode != 0 || b.ErrorCode != 0 || a2.Generation != 2 || b.Generation != 2 || a2.LeaderID != a.MemberID || len(a2.Members) != 2 || len(b.Members) != 0 {
		t.Fatalf("second round: %+v %+v", a2, b)
	}
	bSync := make(chan *kmsg.SyncGroupResponse, 1)
	go func() { bSync <- syncAs(c, "g", b.MemberID, 2, nil) }()
	if r := syncAs(c, "g", a.MemberID, 2, map[string]string{a.MemberID: "p0", b.MemberID: "p1"}); r.ErrorCode != 0 || string(r.MemberAssignment) != "p0" {
		t.Fatalf("leader's second sync: %+v", r)
	}
	if r := <-bSync; r.ErrorCode != 0 || string(r.MemberAssignment) != "p1" {
		t.Fatalf("follower's sync: %+v", r)
	}
	if code := heartbeat(c, "g", a.MemberID, 1); code != errIllegalGeneration {
		t.Fatalf("a heartbeat of generation 1: %d", code)
	}
	if r := join(c, "g", ""); r.ErrorCode != errGroupMaxSize {
		t.Fatalf("a third member of a group of at most 2: %+v", r)
	}
	if r := join(c, "h", ""); r.ErrorCode != errCoordinatorNotAvail {
		t.Fatalf("a second group of at most 1: %+v", r)
	}
	leave := kmsg.NewPtrLeaveGroupRequest()
	leave.SetVersion(3)
	leave.Group, leave.Members = "g", []kmsg.LeaveGroupRequestMember{{MemberID: b.MemberID}}
	if r := c.handleGroup(leave).(*kmsg.LeaveGroupResponse); len(r.Members) != 1 || r.Members[0].ErrorCode != 0 {
		t.Fatalf("leave: %+v", r)
	}
	if code := heartbeat(c, "g", a.MemberID, 2); code != errRebalanceInProgress {
		t.Fatalf("a heartbeat after a member left: %d", code)
	}
	// No heartbeat from here: the session of 3 s runs out.
	for gone := false; !gone; time.Sleep(50 * time.Millisecond) {
		c.s.coord.mu.Lock()
		g := c.s.coord.groups["g"]
		gone = g == nil || g.members[a.MemberID] == nil
		c.s.coord.mu.Unlock()
		if !gone && time.Now().After(deadline.Add(10*time.Second)) {
			t.Fatal("a member that stopped sending heartbeats was never dropped")
		}
	}
	if code := heartbeat(c, "g", a.MemberID, 2); code != errUnknownMember {
		t.Fatalf("a heartbeat after the session ran out: %d", code)
	}
}
