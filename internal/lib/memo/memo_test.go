package memo

import "testing"

// The memory keeps what it is told, up to its bound, and starts over past it.
func TestMap_KeepsUpToItsBoundThenStartsOver(t *testing.T) {
	m := New[int](2)
	m.Put("a", 1)
	m.Update("b", func(v *int) { *v += 2 })
	m.Update("b", func(v *int) { *v += 2 })
	if v, ok := m.Get("a"); !ok || v != 1 {
		t.Errorf("a = %d, %v; want 1", v, ok)
	}
	m.View("b", func(v int, ok bool) {
		if !ok || v != 4 {
			t.Errorf("b = %d, %v; want 4", v, ok)
		}
	})
	m.Put("a", 5) // a key it holds does not count against the bound
	if v, _ := m.Get("b"); v != 4 {
		t.Errorf("b = %d after a's update; want 4", v)
	}
	m.Put("c", 3) // the third key: it starts over
	if _, ok := m.Get("a"); ok {
		t.Error("a kept past the bound")
	}
	if v, ok := m.Get("c"); !ok || v != 3 {
		t.Errorf("c = %d, %v; want 3", v, ok)
	}
	m.Delete("c")
	if _, ok := m.Get("c"); ok {
		t.Error("c kept after Delete")
	}
}
