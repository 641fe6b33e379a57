// Package nodeconfig reads and validates a scadad node's own configuration:
// who the node is, where its data lives, the configured cluster membership,
// its certificates and listeners.
//
// It owns parsing, defaults and validation only. It must not open files
// other than the config itself, start anything, or know about the site
// configuration (that is deployed through the cluster, see siteconfig).
package nodeconfig
