// Command scadactl is the operator CLI for a scadad site: status, members,
// failover, override, snapshots, deploys and the store-and-forward buffer.
//
// It talks to any node over the mutually authenticated control API; the node
// forwards writes to the leader. Exit codes are stable for scripts:
//
//	0  success
//	1  the operation failed (server error, verification failed)
//	2  usage error (bad flags or arguments)
//	3  no node reachable within --timeout
//	4  refused: a precondition did not hold (revision mismatch, peer answering,
//	   confirmation declined)
//	5  not found (unknown target, revision, message id)
package main
