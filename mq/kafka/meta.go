package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/ndma/ndma/mq"
)

// nodeID is the one broker's id: it leads every partition.
const nodeID = 0

// clusterID is the cluster id Metadata reports.
var clusterID = "ndma-mq"

// codeOf maps a store error to a Kafka error code.
func codeOf(err error) int16 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, mq.ErrNotFound):
		return errUnknownTopic
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, mq.ErrUnknownOutcome):
		return errRequestTimedOut
	case errors.Is(err, mq.ErrTooLarge):
		return errMessageTooLarge
	case errors.Is(err, mq.ErrBadRequest):
		return errInvalidRequest
	}
	return errUnknownServer
}

// errText is err's text for a response's error message.
func errText(err error) *string {
	if err == nil {
		return nil
	}
	s := err.Error()
	if len(s) > 300 {
		s = s[:300]
	}
	return &s
}

// metadata answers with the one broker and the topics asked for (all,
// when the request names none); a topic not in the catalog is
// UNKNOWN_TOPIC_OR_PARTITION: topics are never made by asking.
func (c *conn) metadata(req *kmsg.MetadataRequest) *kmsg.MetadataResponse {
	ctx, cancel := c.ctx()
	defer cancel()
	resp := kmsg.NewPtrMetadataResponse()
	host, port := c.advertised()
	resp.Brokers = []kmsg.MetadataResponseBroker{{NodeID: nodeID, Host: host, Port: port}}
	resp.ClusterID, resp.ControllerID = &clusterID, nodeID
	all := req.Topics == nil || req.Version == 0 && len(req.Topics) == 0
	var names []string
	known := make(map[string]*openTopic)
	if all {
		ts, err := c.s.topics.list(ctx)
		if err != nil {
			c.s.cfg.Logger.Warn("kafka: listing the catalog", "err", err)
		}
		for _, o := range ts {
			names = append(names, o.t.Ref().Name)
			known[o.t.Ref().Name] = o
		}
	} else {
		for _, t := range req.Topics {
			if t.Topic == nil {
				continue
			}
			names = append(names, *t.Topic)
			if o, err := c.s.topics.get(ctx, *t.Topic); err == nil {
				known[*t.Topic] = o
			}
		}
	}
	for _, n := range names {
		mt := kmsg.NewMetadataResponseTopic()
		mt.Topic = &n
		o := known[n]
		if o == nil {
			mt.ErrorCode = errUnknownTopic
			resp.Topics = append(resp.Topics, mt)
			continue
		}
		for p := range o.t.Layout().Partitions {
			mp := kmsg.NewMetadataResponseTopicPartition()
			mp.Partition, mp.Leader = int32(p), nodeID
			mp.Replicas, mp.ISR = []int32{nodeID}, []int32{nodeID}
			mt.Partitions = append(mt.Partitions, mp)
		}
		resp.Topics = append(resp.Topics, mt)
	}
	return resp
}

// createTopics makes topics in the catalog: NumPartitions partitions
// (-1: one), ReplicationFactor copies of the data (-1: one; at most
// two), the rest of the layout from Config.Topic. Topic configs are
// refused: an mq topic's layout is set when it is made.
func (c *conn) createTopics(req *kmsg.CreateTopicsRequest) *kmsg.CreateTopicsResponse {
	ctx, cancel := c.ctx()
	defer cancel()
	resp := kmsg.NewPtrCreateTopicsResponse()
	for _, t := range req.Topics {
		rt := kmsg.NewCreateTopicsResponseTopic()
		rt.Topic = t.Topic
		l := c.s.cfg.Topic
		l.Partitions = int(t.NumPartitions)
		if t.NumPartitions == -1 {
			l.Partitions = 1
		}
		copies := int(t.ReplicationFactor)
		if copies == -1 {
			copies = 1
		}
		rt.NumPartitions, rt.ReplicationFactor = int32(l.Partitions), int16(copies)
		var err error
		switch {
		case len(t.ReplicaAssignment) > 0:
			rt.ErrorCode, err = errInvalidRequest, errors.New("replica assignments are not taken: the pool places a topic's data")
		case len(t.Configs) > 0:
			rt.ErrorCode, err = errInvalidConfig, errors.New("topic configs are not taken: the layout is the front end's (ndma mq topic create makes other layouts)")
		case copies < 1 || copies > 2:
			rt.ErrorCode, err = errInvalidReplication, errors.New("a topic keeps 1 or 2 copies of its data")
		default:
			err = l.Check()
			if err == nil {
				err = mq.CheckName(t.Topic)
			}
			if err == nil && !req.ValidateOnly {
				err = c.s.topics.create(ctx, t.Topic, l, mq.CreateOptions{Replicas: copies})
			}
			rt.ErrorCode = createCode(err)
		}
		rt.ErrorMessage = errText(err)
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func createCode(err error) int16 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, mq.ErrExists):
		return errTopicExists
	case errors.Is(err, mq.ErrBadName):
		return errInvalidTopic
	case errors.Is(err, mq.ErrBadLayout):
		return errInvalidPartitions
	case errors.Is(err, mq.ErrFull):
		return errPolicyViolation
	}
	return codeOf(err)
}

// findCoordinator names this front end as every group's coordinator;
// a transaction coordinator is answered INVALID_REQUEST: transactions
// are not served.
func (c *conn) findCoordinator(req *kmsg.FindCoordinatorRequest) *kmsg.FindCoordinatorResponse {
	resp := kmsg.NewPtrFindCoordinatorResponse()
	host, port := c.advertised()
	code, msg := int16(0), (*string)(nil)
	if req.CoordinatorType != 0 {
		code, msg = errInvalidRequest, errText(errors.New("transactions are not served")) // not retriable
	}
	if req.Version < 4 {
		resp.ErrorCode, resp.ErrorMessage = code, msg
		if code == 0 {
			resp.NodeID, resp.Host, resp.Port = nodeID, host, port
		}
		return resp
	}
	for _, k := range req.CoordinatorKeys {
		rc := kmsg.NewFindCoordinatorResponseCoordinator()
		rc.Key, rc.ErrorCode, rc.ErrorMessage = k, code, msg
		if code == 0 {
			rc.NodeID, rc.Host, rc.Port = nodeID, host, port
		}
		resp.Coordinators = append(resp.Coordinators, rc)
	}
	return resp
}
