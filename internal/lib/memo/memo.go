// Package memo is a process's bounded memory of runs: a map safe for concurrent use from a key
// (a run ID) to what the process has learnt of it, which starts over once it holds its bound
// of keys.
// Every memory built on it only saves storage calls: what it forgets costs a call, never a
// wrong answer.
package memo

import "sync"

// Map is the memory. Its zero value is not usable: make one with New.
type Map[V any] struct {
	max int
	mu  sync.Mutex
	m   map[string]V
}

// New returns an empty memory of at most max keys.
func New[V any](max int) *Map[V] { return &Map[V]{max: max} }

// Get returns k's value.
func (m *Map[V]) Get(k string) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[k]
	return v, ok
}

// Put sets k's value.
func (m *Map[V]) Put(k string, v V) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.putLocked(k, v)
}

// Delete forgets k.
func (m *Map[V]) Delete(k string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, k)
}

// Update calls fn with k's value (the zero value when absent) while no one else can use the
// memory, and keeps what fn leaves.
func (m *Map[V]) Update(k string, fn func(v *V)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.m[k]
	fn(&v)
	m.putLocked(k, v)
}

// View calls fn with k's value (ok false when absent) while no one else can use the memory:
// for values holding references, which fn must not keep.
func (m *Map[V]) View(k string, fn func(v V, ok bool)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.m[k]
	fn(v, ok)
}

func (m *Map[V]) putLocked(k string, v V) {
	if _, ok := m.m[k]; !ok && (m.m == nil || len(m.m) >= m.max) {
		m.m = map[string]V{}
	}
	m.m[k] = v
}
