package roletest

import (
	"testing"

	"github.com/scadad/scadad/role"
)

func TestLateConfirmationAnswersDetachedOnlyWhileLate(t *testing.T) {
	l := New(role.State{Role: role.Active})
	if r := l.Current().Role; r != role.Active {
		t.Fatalf("confirmed: %v, want Active", r)
	}
	l.LateFor(2)
	for i := range 2 {
		if s := l.Current(); s.Role != role.Detached || !s.Unconfirmed {
			t.Fatalf("late call %d: %+v, want Detached and Unconfirmed", i+1, s)
		}
	}
	if r := l.Current().Role; r != role.Active {
		t.Fatalf("after two late calls: %v, want Active", r)
	}
	l.Late()
	l.Current()
	l.Confirmed()
	if r := l.Current().Role; r != role.Active {
		t.Fatalf("confirmed again: %v, want Active", r)
	}
	if n := l.Asked(); n != 3 {
		t.Fatalf("Asked = %d, want 3", n)
	}
	ch, stop := l.Watch()
	defer stop()
	if s := <-ch; s.Role != role.Active {
		t.Fatalf("Watch: %v, want Active (a late confirmation publishes nothing)", s.Role)
	}
}
