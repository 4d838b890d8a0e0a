package kafka

import (
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// handleGroup answers JoinGroup, SyncGroup, Heartbeat and LeaveGroup.
func (c *conn) handleGroup(body kmsg.Request) kmsg.Response {
	switch req := body.(type) {
	case *kmsg.JoinGroupRequest:
		return c.joinGroup(req)
	case *kmsg.SyncGroupRequest:
		return c.syncGroup(req)
	case *kmsg.HeartbeatRequest:
		resp := kmsg.NewPtrHeartbeatResponse()
		co := c.s.coord
		co.mu.Lock()
		g, _, code := co.lookup(req.Group, req.MemberID, req.Generation)
		if code == 0 && g.state == groupPreparing {
			code = errRebalanceInProgress
		}
		co.mu.Unlock()
		resp.ErrorCode = code
		return resp
	case *kmsg.LeaveGroupRequest:
		return c.leaveGroup(req)
	}
	panic("kafka: handleGroup: not a group request") // handle dispatches only these here
}

// joinGroup adds the member to the group's join round and waits for
// the round to end.
func (c *conn) joinGroup(req *kmsg.JoinGroupRequest) *kmsg.JoinGroupResponse {
	resp := kmsg.NewPtrJoinGroupResponse()
	session := time.Duration(req.SessionTimeoutMillis) * time.Millisecond
	rebal := session
	if req.Version >= 1 {
		rebal = time.Duration(req.RebalanceTimeoutMillis) * time.Millisecond
	}
	resp.Generation = -1
	if session < minSession || session > maxSession || rebal <= 0 || rebal > maxSession {
		resp.ErrorCode = errInvalidSessionTimeout
		return resp
	}
	if len(req.Protocols) == 0 || req.ProtocolType == "" || req.Group == "" {
		resp.ErrorCode = errInconsistentProtocol
		return resp
	}
	co := c.s.coord
	co.mu.Lock()
	g := co.groups[req.Group]
	if g == nil {
		if len(co.groups) >= co.maxGroups {
			co.mu.Unlock()
			resp.ErrorCode = errCoordinatorNotAvail
			return resp
		}
		g = &group{name: req.Group, members: make(map[string]*member), protoType: req.ProtocolType}
		co.groups[req.Group] = g
	}
	if len(g.members) > 0 && g.protoType != req.ProtocolType {
		co.mu.Unlock()
		resp.ErrorCode = errInconsistentProtocol
		return resp
	}
	g.protoType = req.ProtocolType
	m := g.members[req.MemberID]
	if m == nil && req.MemberID != "" {
		co.mu.Unlock()
		resp.ErrorCode = errUnknownMember
		return resp
	}
	if m == nil {
		if len(g.members) >= co.maxMembers {
			co.mu.Unlock()
			resp.ErrorCode = errGroupMaxSize
			return resp
		}
		m = &member{id: co.newMemberID(c.clientID())}
		g.members[m.id] = m
	}
	m.instanceID, m.protocols, m.session, m.rebal = req.InstanceID, req.Protocols, session, rebal
	m.lastSeen = time.Now()
	g.rebalance(m.lastSeen)
	m.joined, m.waiting = true, true
	if g.allJoined() {
		g.completeJoin()
	}
	done := g.joinDone
	co.mu.Unlock()
	if done != nil {
		select {
		case <-done:
		case <-c.s.base.Done():
		}
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	m.waiting, m.lastSeen = false, time.Now()
	if g.members[m.id] != m || g.state != groupCompleting {
		resp.ErrorCode = errRebalanceInProgress
		if g.members[m.id] != m {
			resp.ErrorCode = errUnknownMember
		}
		return resp
	}
	resp.Generation, resp.LeaderID, resp.MemberID = g.generation, g.leader, m.id
	proto, ptype := g.protocol, g.protoType
	resp.Protocol, resp.ProtocolType = &proto, &ptype
	if m.id == g.leader {
		for _, o := range g.members {
			rm := kmsg.NewJoinGroupResponseMember()
			rm.MemberID, rm.InstanceID = o.id, o.instanceID
			for _, p := range o.protocols {
				if p.Name == proto {
					rm.ProtocolMetadata = p.Metadata
				}
			}
			resp.Members = append(resp.Members, rm)
		}
	}
	return resp
}

// syncGroup takes the leader's assignments and hands each member its
// own, waiting for the leader's when it has not come yet.
func (c *conn) syncGroup(req *kmsg.SyncGroupRequest) *kmsg.SyncGroupResponse {
	resp := kmsg.NewPtrSyncGroupResponse()
	co := c.s.coord
	co.mu.Lock()
	g, m, code := co.lookup(req.Group, req.MemberID, req.Generation)
	if code == 0 && g.state == groupPreparing {
		code = errRebalanceInProgress
	}
	if code != 0 {
		co.mu.Unlock()
		resp.ErrorCode = code
		return resp
	}
	if g.state == groupCompleting && m.id == g.leader {
		for _, a := range req.GroupAssignment {
			if o := g.members[a.MemberID]; o != nil {
				o.assignment = a.MemberAssignment
			}
		}
		g.state = groupStable
		close(g.syncDone)
		g.syncDone = nil
	}
	gen, done, wait := g.generation, g.syncDone, m.rebal
	co.mu.Unlock()
	if done != nil {
		t := time.NewTimer(wait)
		select {
		case <-done:
		case <-t.C:
		case <-c.s.base.Done():
		}
		t.Stop()
	}
	co.mu.Lock()
	defer co.mu.Unlock()
	if g.members[m.id] != m || g.generation != gen || g.state != groupStable {
		resp.ErrorCode = errRebalanceInProgress
		return resp
	}
	proto, ptype := g.protocol, g.protoType
	resp.Protocol, resp.ProtocolType = &proto, &ptype
	resp.MemberAssignment = m.assignment
	return resp
}

// leaveGroup removes members; the others rebalance.
func (c *conn) leaveGroup(req *kmsg.LeaveGroupRequest) *kmsg.LeaveGroupResponse {
	resp := kmsg.NewPtrLeaveGroupResponse()
	co := c.s.coord
	co.mu.Lock()
	defer co.mu.Unlock()
	g := co.groups[req.Group]
	leave := func(id string) int16 {
		if g == nil || g.members[id] == nil {
			return errUnknownMember
		}
		delete(g.members, id)
		g.rebalance(time.Now())
		return 0
	}
	if req.Version < 3 {
		resp.ErrorCode = leave(req.MemberID)
		return resp
	}
	for _, lm := range req.Members {
		rm := kmsg.NewLeaveGroupResponseMember()
		rm.MemberID, rm.InstanceID = lm.MemberID, lm.InstanceID
		rm.ErrorCode = leave(lm.MemberID)
		resp.Members = append(resp.Members, rm)
	}
	return resp
}
