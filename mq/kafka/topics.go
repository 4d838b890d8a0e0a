package kafka

import (
	"context"
	"errors"
	"sync"

	"github.com/ndma/ndma/mq"
)

// topics keeps the catalog's topics open, by name: at most the
// catalog's slots (mq.MaxCatalogSlots), each with the producer the
// front end writes it with.
type topics struct {
	cat  *mq.Catalog
	mu   sync.Mutex
	open map[string]*openTopic // under mu
}

type openTopic struct {
	t    *mq.Topic
	prod *mq.Producer
}

func newTopics(cat *mq.Catalog) *topics {
	return &topics{cat: cat, open: make(map[string]*openTopic)}
}

// get opens topic name, or returns it open; an error wrapping
// mq.ErrNotFound when the catalog does not name it.
func (ts *topics) get(ctx context.Context, name string) (*openTopic, error) {
	ts.mu.Lock()
	o := ts.open[name]
	ts.mu.Unlock()
	if o != nil {
		return o, nil
	}
	if mq.CheckName(name) != nil {
		return nil, mq.ErrNotFound
	}
	t, err := ts.cat.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	return ts.put(t), nil
}

func (ts *topics) put(t *mq.Topic) *openTopic {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if o := ts.open[t.Ref().Name]; o != nil && o.t.Ref() == t.Ref() {
		return o
	}
	o := &openTopic{t: t, prod: mq.NewProducer(t, mq.ProducerConfig{Acks: mq.AcksAll})}
	ts.open[t.Ref().Name] = o
	return o
}

// list reads the catalog: every topic, open, by catalog order. A topic
// removed and made again under its name is opened again.
func (ts *topics) list(ctx context.Context) ([]*openTopic, error) {
	refs, err := ts.cat.Topics(ctx)
	if err != nil {
		return nil, err
	}
	names := make(map[string]bool, len(refs))
	var out []*openTopic
	var errs []error
	for _, r := range refs {
		names[r.Name] = true
		ts.mu.Lock()
		o := ts.open[r.Name]
		ts.mu.Unlock()
		if o == nil || o.t.Ref() != r {
			t, err := ts.cat.OpenRef(ctx, r)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			o = ts.put(t)
		}
		out = append(out, o)
	}
	ts.mu.Lock()
	for n := range ts.open {
		if !names[n] {
			delete(ts.open, n)
		}
	}
	ts.mu.Unlock()
	if len(out) == 0 && len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// create makes topic name in the catalog and keeps it open.
func (ts *topics) create(ctx context.Context, name string, l mq.Layout, o mq.CreateOptions) error {
	t, err := ts.cat.Create(ctx, name, l, o)
	if err != nil {
		return err
	}
	ts.put(t)
	return nil
}
