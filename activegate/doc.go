// Package activegate is the seeds' Primary data-plane gate for scadad: one
// policy (Decide) for the three Active-only surfaces — device writes, alarm
// acknowledgements (and confirms) that reach the gateway, and the alarm
// emit (alarm history, notifications) — and one counter of its denials,
// scadad_gate_denied_total{surface,reason}.
//
// It owns the decision and the count. It must not perform any of the
// gated actions, nor know how a role is learnt (package role does).
package activegate
