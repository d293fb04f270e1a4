package pipeline

import (
	"errors"
	"log/slog"
	"sync/atomic"

	"github.com/heatscope/heatscope/sample"
	"github.com/heatscope/heatscope/store"
)

// Appender is the store a recording appends to: store.DB.
type Appender interface {
	// Append adds a sample; an error says it was not kept, or not
	// durably (store.ErrNotDurable).
	Append(s *sample.Sample) error
	// SetPeriod says the samples appended from now on were taken at
	// another period: the store cuts its head, so that each block states
	// one period.
	SetPeriod(periodNs int64)
}

// Store is the sink that appends each sample to a store. A failing
// append does not stop the recording: it is counted (AppendErrors, the
// progress line and /metrics show the count), and logged once per
// episode, when appends start failing and when they work again.
type Store struct {
	db     Appender
	log    *slog.Logger
	period int64

	errors atomic.Uint64
	// episode counts the failed appends since they began to fail, 0 while
	// appends work; lastErr is the last one's error. Add and Close alone
	// use them, on the recorder's goroutine.
	episode uint64
	lastErr error
}

// NewStore returns a sink appending to db, whose samples are taken every
// periodNs (the period db was opened with) until a sample says otherwise.
func NewStore(db Appender, periodNs int64, log *slog.Logger) *Store {
	return &Store{db: db, log: log, period: periodNs}
}

// Add appends s, first telling the store of a new period when s was taken
// at one (the overhead guard changed the frequency).
func (st *Store) Add(s *sample.Sample) {
	if s.PeriodNs > 0 && s.PeriodNs != st.period {
		st.period = s.PeriodNs
		st.db.SetPeriod(st.period)
	}
	err := st.db.Append(s)
	if err != nil {
		st.errors.Add(1)
		if st.episode == 0 {
			st.log.Warn("store appends fail: recording goes on, failed appends are counted",
				"kept in memory", errors.Is(err, store.ErrNotDurable), "err", err)
		}
		st.episode++
		st.lastErr = err
		return
	}
	if st.episode > 0 {
		st.log.Info("store appends work again", "failed appends", st.episode, "last err", st.lastErr)
		st.episode, st.lastErr = 0, nil
	}
}

// Close logs an episode of failed appends still going on.
func (st *Store) Close() error {
	if st.episode > 0 {
		st.log.Warn("the recording stopped while the store's appends were failing", "failed appends", st.episode, "last err", st.lastErr)
	}
	return nil
}

// AppendErrors is how many appends have failed since the recording began.
func (st *Store) AppendErrors() uint64 { return st.errors.Load() }
