package uasec

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gopcua/opcua/ua"
	"github.com/gopcua/opcua/uapolicy"
)

// Resolved is a security policy and mode as the OPC UA stack names them.
type Resolved struct {
	PolicyURI string
	Mode      ua.MessageSecurityMode
}

// policyURIPrefix begins the URI of every security policy the OPC UA
// specification defines; the short names are what follows it.
const policyURIPrefix = "http://opcfoundation.org/UA/SecurityPolicy#"

// String is the security as the site config writes it: "Basic256Sha256/SignAndEncrypt".
func (r Resolved) String() string {
	return strings.TrimPrefix(r.PolicyURI, policyURIPrefix) + "/" + strings.TrimPrefix(r.Mode.String(), "MessageSecurityMode")
}

// Resolve checks a security policy (a short name such as "Basic256Sha256"
// or a full policy URI) and mode ("None", "Sign", "SignAndEncrypt"), and
// returns them as the OPC UA stack names them.
func Resolve(policy, mode string) (Resolved, error) {
	uri := policy
	if !strings.HasPrefix(uri, "http://") {
		uri = policyURIPrefix + policy
	}
	if !slices.Contains(uapolicy.SupportedPolicies(), uri) {
		return Resolved{}, fmt.Errorf("security policy %q is not supported", policy)
	}
	m := ua.MessageSecurityModeFromString(mode)
	if m == ua.MessageSecurityModeInvalid {
		return Resolved{}, fmt.Errorf("security mode %q is not one of None, Sign, SignAndEncrypt", mode)
	}
	if (uri == ua.SecurityPolicyURINone) != (m == ua.MessageSecurityModeNone) {
		return Resolved{}, fmt.Errorf("security policy %s needs mode %s", policy, map[bool]string{true: "None", false: "Sign or SignAndEncrypt"}[uri == ua.SecurityPolicyURINone])
	}
	return Resolved{PolicyURI: uri, Mode: m}, nil
}
