package passhash

import (
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"golang.org/x/crypto/argon2"
)

// The parameters of new hashes: OWASP's recommended argon2id
// configuration (19 MiB, 2 passes, 1 lane). An OPC UA login costs one
// verification, a few tens of milliseconds, and the memory is what makes
// a stolen hash expensive to guess against on GPUs.
const (
	memoryKiB = 19 * 1024
	passes    = 2
	lanes     = 1
	saltBytes = 16
	keyBytes  = 32
)

// Bounds on a stored hash's parameters: what a node agrees to spend on
// one verification.
const (
	maxMemoryKiB = 256 * 1024
	maxPasses    = 16
	maxLanes     = 16
	minSaltBytes = 8
	maxSaltBytes = 64
	minKeyBytes  = 16
	maxKeyBytes  = 64
	// MaxPasswordBytes bounds a password: a login is outside input.
	MaxPasswordBytes = 1024
)

// ErrMalformed is a hash that is not a PHC argon2id string within bounds.
var ErrMalformed = errors.New("not an argon2id password hash within bounds")

// Hash returns the PHC string of password with a fresh salt read from
// random (crypto/rand.Reader in production).
func Hash(password []byte, random io.Reader) (string, error) {
	if len(password) == 0 {
		return "", errors.New("hash password: it is empty")
	}
	if len(password) > MaxPasswordBytes {
		return "", fmt.Errorf("hash password: %d bytes, at most %d", len(password), MaxPasswordBytes)
	}
	salt := make([]byte, saltBytes)
	if _, err := io.ReadFull(random, salt); err != nil {
		return "", fmt.Errorf("hash password: read salt: %w", err)
	}
	p := params{memory: memoryKiB, passes: passes, lanes: lanes, salt: salt}
	p.key = argon2.IDKey(password, salt, p.passes, p.memory, p.lanes, keyBytes)
	return p.String(), nil
}

// Check reports whether encoded is a hash Verify accepts, naming what is
// wrong when it is not. It is deterministic and cheap (no hashing).
func Check(encoded string) error {
	_, err := parse(encoded)
	return err
}

// Verify reports whether password is the one encoded was made from. The
// comparison takes the same time wherever the two differ.
func Verify(encoded string, password []byte) (bool, error) {
	p, err := parse(encoded)
	if err != nil {
		return false, err
	}
	if len(password) > MaxPasswordBytes {
		return false, nil
	}
	got := argon2.IDKey(password, p.salt, p.passes, p.memory, p.lanes, uint32(len(p.key)))
	return subtle.ConstantTimeCompare(got, p.key) == 1, nil
}

type params struct {
	memory, passes uint32
	lanes          uint8
	salt, key      []byte
}

func (p params) String() string {
	enc := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.memory, p.passes, p.lanes, enc.EncodeToString(p.salt), enc.EncodeToString(p.key))
}

func parse(encoded string) (params, error) {
	var p params
	bad := func(format string, args ...any) (params, error) {
		return params{}, fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	if len(encoded) > 512 {
		return bad("%d characters", len(encoded))
	}
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[0] != "" {
		return bad("want $argon2id$v=19$m=…,t=…,p=…$salt$hash")
	}
	if parts[1] != "argon2id" {
		return bad("algorithm %q, want argon2id", parts[1])
	}
	if parts[2] != "v="+strconv.Itoa(argon2.Version) {
		return bad("version %q, want v=%d", parts[2], argon2.Version)
	}
	fields := strings.Split(parts[3], ",")
	if len(fields) != 3 {
		return bad("parameters %q, want m=…,t=…,p=…", parts[3])
	}
	var m, t, l uint64
	for i, want := range []struct {
		key string
		dst *uint64
		min uint64
		max uint64
	}{{"m", &m, 8, maxMemoryKiB}, {"t", &t, 1, maxPasses}, {"p", &l, 1, maxLanes}} {
		v, ok := strings.CutPrefix(fields[i], want.key+"=")
		n, err := strconv.ParseUint(v, 10, 32)
		if !ok || err != nil || n < want.min || n > want.max {
			return bad("parameter %q, want %s= from %d to %d", fields[i], want.key, want.min, want.max)
		}
		*want.dst = n
	}
	if m < 8*l {
		return bad("memory %d KiB below 8 KiB per lane", m)
	}
	enc := base64.RawStdEncoding.Strict()
	salt, err := enc.DecodeString(parts[4])
	if err != nil || len(salt) < minSaltBytes || len(salt) > maxSaltBytes {
		return bad("salt: want %d to %d bytes of unpadded base64", minSaltBytes, maxSaltBytes)
	}
	key, err := enc.DecodeString(parts[5])
	if err != nil || len(key) < minKeyBytes || len(key) > maxKeyBytes {
		return bad("hash: want %d to %d bytes of unpadded base64", minKeyBytes, maxKeyBytes)
	}
	p = params{memory: uint32(m), passes: uint32(t), lanes: uint8(l), salt: salt, key: key}
	return p, nil
}
