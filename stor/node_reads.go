package stor

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/ndma/ndma/endpoint"
)

func (n *Node) read(who endpoint.Caller, b []byte) []byte {
	r, ok := parseRead(b)
	if !ok {
		return n.refuse(CodeBadRequest, "read: malformed")
	}
	v, refused := n.volume(who, r.Name)
	if v == nil {
		return refused
	}
	resync := r.MinVer&resyncRead != 0
	minVer := r.MinVer &^ resyncRead
	if !n.applied(v.joinedGroups()) {
		return n.refuse(CodeNotReady, fmt.Sprintf("volume %s: node %d has not applied the writes that reached it yet", r.Name, n.st.id))
	}
	// A write the writer saw complete may still be on its way from this
	// node's transport to the disk: wait for it a little.
	for wait := time.Duration(0); ; wait += time.Millisecond {
		v.mu.Lock()
		e, err := v.check(n.st.id, r.Off, int(r.Len))
		if err != nil {
			v.mu.Unlock()
			return n.refuseErr(err)
		}
		switch {
		case v.removed:
			v.mu.Unlock()
			return n.refuse(CodeNoVolume, r.Name)
		case v.stale[e] || !v.ready && (!resync || v.meta.Outdated):
			v.mu.Unlock()
			return n.refuse(CodeNotReady, fmt.Sprintf("volume %s: node %d is resyncing", r.Name, n.st.id))
		case v.versions[e] < minVer:
			v.mu.Unlock()
			if wait >= readWait {
				return n.refuse(CodeNotReady, fmt.Sprintf("extent %d: node %d has version %#x, want %#x", e, n.st.id, v.versions[e], minVer))
			}
			time.Sleep(time.Millisecond)
			continue
		}
		if n.trace {
			n.log.Log(n.ctx, LevelTrace, "stor: read", "node", n.st.id, "off", r.Off, "len", r.Len, "version", v.versions[e],
				"generation", v.meta.Gen, "state", v.state, "resync", resync)
		}
		out := make([]byte, 9+int(r.Len))
		out[0] = byte(CodeOK)
		binary.BigEndian.PutUint64(out[1:], v.versions[e])
		_, err = readAt(v.data, out[9:], int64(r.Off))
		v.mu.Unlock()
		if err != nil {
			return n.refuseErr(ioErr(err))
		}
		n.mu.Lock()
		n.stats.Reads++
		n.stats.ReadBytes += uint64(r.Len)
		n.mu.Unlock()
		return out
	}
}

// readWait bounds how long a read waits for a write it asks for.
const readWait = 200 * time.Millisecond

// resyncRead marks a read another replica makes to copy an extent: it may
// read a node that is itself resyncing, from extents that are not stale.
const resyncRead = 1 << 63

func (n *Node) versions(who endpoint.Caller, b []byte) []byte {
	d := dec{b: b}
	name := d.str()
	v, refused := n.volume(who, name)
	if v == nil {
		return refused
	}
	if !n.applied(v.joinedGroups()) {
		return n.refuse(CodeNotReady, fmt.Sprintf("volume %s: node %d has not applied the writes that reached it yet", name, n.st.id))
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make([]byte, 1, 1+8*len(v.versions))
	for e, ver := range v.versions {
		if v.stale[e] {
			ver = 0
		}
		out = binary.BigEndian.AppendUint64(out, ver)
	}
	return out
}
