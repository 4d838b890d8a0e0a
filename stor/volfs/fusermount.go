package volfs

import (
	"bytes"
	"errors"
	"fmt"
	"os/exec"
)

// fusermountU unmounts dir with fusermount3 (or fusermount) -u, as a user
// without the privilege to unmount does; lazy adds -z.
func fusermountU(dir string, lazy bool) error {
	var bin string
	for _, name := range []string{"fusermount3", "fusermount"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		return errors.New("no privilege to unmount, and no fusermount3 or fusermount")
	}
	args := []string{"-u"}
	if lazy {
		args = append(args, "-z")
	}
	out, err := exec.Command(bin, append(args, dir)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %v %s: %w: %s", bin, args, dir, err, bytes.TrimSpace(out))
	}
	return nil
}
