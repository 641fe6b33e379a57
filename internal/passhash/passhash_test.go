package passhash

import (
	"bytes"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
)

func TestHashVerifies(t *testing.T) {
	h, err := Hash([]byte("op-secret"), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") || strings.Contains(h, "op-secret") {
		t.Fatalf("hash %q", h)
	}
	if err := Check(h); err != nil {
		t.Fatal(err)
	}
	for pw, want := range map[string]bool{"op-secret": true, "op-secreT": false, "": false, "op-secret\n": false} {
		if ok, err := Verify(h, []byte(pw)); err != nil || ok != want {
			t.Errorf("Verify(%q) = %v, %v; want %v", pw, ok, err, want)
		}
	}
	h2, _ := Hash([]byte("op-secret"), rand.Reader)
	if h2 == h {
		t.Error("two hashes of one password are the same: no fresh salt")
	}
}

func TestHashRefusesEmptyAndHuge(t *testing.T) {
	if _, err := Hash(nil, rand.Reader); err == nil {
		t.Error("an empty password was hashed")
	}
	if _, err := Hash(bytes.Repeat([]byte("x"), MaxPasswordBytes+1), rand.Reader); err == nil {
		t.Error("a huge password was hashed")
	}
	if _, err := Hash([]byte("x"), bytes.NewReader(nil)); err == nil {
		t.Error("hashed without randomness for the salt")
	}
}

// A stored hash is replicated input another node verifies against: one
// that would cost gigabytes or is not argon2id is refused, naming why.
func TestCheckRefusesWhatANodeWouldNotVerify(t *testing.T) {
	good, _ := Hash([]byte("pw"), rand.Reader)
	parts := strings.Split(good, "$")
	for name, h := range map[string]string{
		"empty":        "",
		"plaintext":    "op-secret",
		"bcrypt":       "$2a$10$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy",
		"argon2i":      strings.Replace(good, "argon2id", "argon2i", 1),
		"old version":  strings.Replace(good, "v=19", "v=16", 1),
		"4 GiB memory": strings.Replace(good, "m=19456", "m=4194304", 1),
		"1000 passes":  strings.Replace(good, "t=2", "t=1000", 1),
		"no lanes":     strings.Replace(good, "p=1", "p=0", 1),
		"short salt":   strings.Join([]string{"", parts[1], parts[2], parts[3], "AAAA", parts[5]}, "$"),
		"short hash":   strings.Join([]string{"", parts[1], parts[2], parts[3], parts[4], "AAAA"}, "$"),
		"bad base64":   strings.Join([]string{"", parts[1], parts[2], parts[3], parts[4] + "!", parts[5]}, "$"),
		"extra field":  good + "$x",
	} {
		if err := Check(h); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Check(%q) = %v, want ErrMalformed", name, h, err)
		}
		if ok, err := Verify(h, []byte("pw")); ok || err == nil {
			t.Errorf("%s: Verify = %v, %v", name, ok, err)
		}
	}
}
