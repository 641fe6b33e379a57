// Package netguard bounds what one listener may cost the process: how many
// connections it holds in total and per client address (its share of the
// process's file descriptors), and it keeps accepting through the errors a
// loaded machine gives (out of descriptors, out of memory) instead of
// reporting them as the end of the listener. It also holds the budget of
// request-body bytes a server may have buffered at once.
//
// It owns only those bounds: it does not speak any protocol, log, or decide
// what a node does when a listener stops for good (the daemon does).
package netguard
