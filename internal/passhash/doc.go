// Package passhash hashes and checks passwords for the identities scadad
// keeps in its replicated state (OPC UA user names): argon2id (RFC 9106),
// written in the PHC string format
// ($argon2id$v=19$m=KiB,t=passes,p=lanes$salt$hash, unpadded base64), so
// the state holds a salted hash and never a password.
//
// It owns the choice of algorithm and parameters, and the bounds a stored
// hash must keep (Check): a hash is replicated data another node verifies
// against, so one whose parameters would take gigabytes or minutes to
// verify is refused before it is stored.
//
// passhash must not: log, keep a password after it returns, or keep
// package-level state (the randomness for salts is passed in).
package passhash
