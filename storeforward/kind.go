package storeforward

import (
	"context"

	"github.com/rs/zerolog"

	"github.com/scadad/scadad/role"
)

// Sender delivers one target's messages. A worker makes one when it starts
// (under one epoch) and closes it when it stops; it is used by up to the
// target's MaxInFlight goroutines at once.
type Sender interface {
	// Send delivers batch, 1..BatchMaxMessages messages in FIFO order, as
	// one unit: nil means the receiver took every message; an error means
	// none is known to be taken (the whole batch is tried again). An
	// error that carries the receiver's answer implements Refusal, which
	// decides whether the messages are parked (a batch refused for good
	// is tried again one message at a time, so only the poison one parks).
	// ctx carries the attempt's timeout and ends when the worker stops.
	Send(ctx context.Context, batch []*Message) error
	// Close lets go of connections and sessions.
	Close()
}

// Kind is one kind of target (HTTP, PostgreSQL, MQTT, ...). The Deliverer
// knows HTTP itself; DelivererOptions.Kinds adds others by name.
type Kind interface {
	// Validate checks a target's kind-specific configuration (Settings).
	Validate(t Target) error
	// NewSender makes the sender of one worker. It must not block on the
	// receiver: connecting is Send's job (a failure there is an attempt
	// that failed, counted and retried).
	NewSender(t Target, env SenderEnv) (Sender, error)
}

// SenderEnv is what a Sender may use of the worker that owns it.
type SenderEnv struct {
	// Epoch is the role epoch the worker delivers under.
	Epoch role.Epoch
	// NodeID is this node (Actor).
	NodeID string
	Logger zerolog.Logger
}

// KindHTTP is the built-in kind, also that of a target with no Kind.
const KindHTTP = "http"

// kindOf is the target's kind name.
func kindOf(t Target) string {
	if t.Kind == "" {
		return KindHTTP
	}
	return t.Kind
}
