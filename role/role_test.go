package role

import "testing"

func TestEpochLess(t *testing.T) {
	tests := []struct {
		a, b Epoch
		want bool
	}{
		{Epoch{1, 5}, Epoch{1, 6}, true},
		{Epoch{1, 6}, Epoch{1, 5}, false},
		{Epoch{1, 9}, Epoch{2, 1}, true},
		{Epoch{2, 1}, Epoch{1, 9}, false},
		{Epoch{2, 3}, Epoch{2, 3}, false},
	}
	for _, tt := range tests {
		if got := tt.a.Less(tt.b); got != tt.want {
			t.Errorf("%v.Less(%v) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestBroadcasterCoalescesToNewest(t *testing.T) {
	b := NewBroadcaster(State{Role: Detached})
	ch, stop := b.Watch()
	defer stop()
	if s := <-ch; s.Role != Detached {
		t.Fatalf("first state = %v, want detached", s.Role)
	}
	b.Publish(State{Role: Standby})
	b.Publish(State{Role: Active, Epoch: Epoch{1, 2}})
	s := <-ch
	if s.Role != Active || s.Epoch != (Epoch{1, 2}) {
		t.Fatalf("watcher got %+v, want the newest (active 1.2)", s)
	}
	select {
	case s := <-ch:
		t.Fatalf("unexpected extra state %+v", s)
	default:
	}
	if b.Current().Role != Active {
		t.Fatalf("Current = %v, want active", b.Current().Role)
	}
}

func TestReadsField(t *testing.T) {
	tests := []struct {
		r    Role
		hot  bool
		want bool
	}{
		{Active, false, true}, {Active, true, true},
		{Standby, false, false}, {Standby, true, true},
		{Witness, false, false}, {Witness, true, false},
		{Detached, false, false}, {Detached, true, false},
	}
	for _, tt := range tests {
		if got := tt.r.ReadsField(tt.hot); got != tt.want {
			t.Errorf("%v.ReadsField(hot standby %v) = %v, want %v", tt.r, tt.hot, got, tt.want)
		}
	}
}
