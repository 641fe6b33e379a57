package siteconfig

import "fmt"

// Retired lists what s names that this release no longer reads, each with
// the command that moves it: a push of such a config is refused (the
// deploy package), and a node whose deployed config still names it warns
// at start. Validate accepts them, so a config deployed before the upgrade
// still runs its other parts. None: nil.
//
// opcua.identities.users: per-node password files were read in v0.1.0
// only; the users live in the replicated state (scadactl opcua users set).
func (s *Site) Retired() []string {
	var out []string
	for i, u := range s.OPCUA.Identities.Users {
		write := ""
		if u.CanWrite {
			write = " --can-write"
		}
		out = append(out, fmt.Sprintf("opcua.identities.users[%d] (%q): per-node password files are no longer read since v0.2.0, so this user cannot log in; move it with scadactl opcua users set %s --password-file %s%s, then remove identities.users from the site config",
			i, u.Username, u.Username, u.PasswordFile, write))
	}
	return out
}
