package memory

import (
	"context"
	"slices"

	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/wire"
)

// The partitions of a map/reduce by key, in memory: each partition's
// partials by field, and its output pages.

// partition names one partition of a job.
type partition struct {
	job  string
	part int
}

// shuffleState is what a shard keeps of the partitions.
type shuffleState struct {
	partials map[partition]map[string][]byte
	outputs  map[partition][][]byte
	records  map[string]wire.Shuffle // RecordShuffle's, by job
}

func newShuffleState() shuffleState {
	return shuffleState{partials: map[partition]map[string][]byte{}, outputs: map[partition][][]byte{}, records: map[string]wire.Shuffle{}}
}

// StorePartials stores a map task's partials, partition i's under p.Field:
// a run again replaces them.
func (s *Shard) StorePartials(_ context.Context, p *broker.StorePartialsParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("storepartials"); err != nil {
		return err
	}
	for i, b := range p.Partials {
		k := partition{p.Shuffle.Job, i}
		if s.sh.partials[k] == nil {
			s.sh.partials[k] = map[string][]byte{}
		}
		s.sh.partials[k][p.Field] = append([]byte{}, b...) // an empty partial reads back empty, not missing
	}
	return nil
}

// Partials returns partition p.Part's partials of p.Fields, nil for each
// one not stored.
func (s *Shard) Partials(_ context.Context, p *broker.PartialsParams) ([][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("partials"); err != nil {
		return nil, err
	}
	if len(p.Fields) == 0 {
		return nil, nil
	}
	out := make([][]byte, len(p.Fields))
	for i, f := range p.Fields {
		out[i] = slices.Clone(s.sh.partials[partition{p.Shuffle.Job, p.Part}][f])
	}
	return out, nil
}

// StoreOutput replaces partition p.Part's partials with its output pages.
func (s *Shard) StoreOutput(_ context.Context, p *broker.StoreOutputParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("storeoutput"); err != nil {
		return err
	}
	k := partition{p.Shuffle.Job, p.Part}
	pages := make([][]byte, len(p.Pages))
	for i, pg := range p.Pages {
		pages[i] = slices.Clone(pg)
	}
	s.sh.outputs[k] = pages
	delete(s.sh.partials, k)
	return nil
}

// OutputPage returns page p.Page of partition p.Part's output, or
// broker.ErrPageMissing.
func (s *Shard) OutputPage(_ context.Context, p *broker.OutputPageParams) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("outputpage"); err != nil {
		return nil, err
	}
	pages := s.sh.outputs[partition{p.Shuffle.Job, p.Part}]
	i := p.Page
	if i < 0 {
		i += len(pages) // LINDEX counts from the end
	}
	if i < 0 || i >= len(pages) {
		return nil, broker.ErrPageMissing
	}
	return slices.Clone(pages[i]), nil
}

// RenewPartitions keeps the partitions: memory's never expire.
func (s *Shard) RenewPartitions(context.Context, *broker.PartitionsParams) error {
	return s.rec.Call("renewpartitions")
}

// DropPartitions deletes the partials and outputs of partitions p.Parts.
func (s *Shard) DropPartitions(_ context.Context, p *broker.PartitionsParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("droppartitions"); err != nil {
		return err
	}
	for _, i := range p.Parts {
		k := partition{p.Shuffle.Job, i}
		delete(s.sh.partials, k)
		delete(s.sh.outputs, k)
	}
	return nil
}

// RecordShuffle records where a durable job's partitions are.
func (s *Shard) RecordShuffle(_ context.Context, p *broker.RecordShuffleParams) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.rec.Call("recordshuffle"); err != nil {
		return err
	}
	s.sh.records[p.Shuffle.Job] = *p.Shuffle
	return nil
}
