// Package baton runs your scheduled, partitioned jobs on a scaled-out Azure Functions app,
// exactly once per occurrence, as a Go custom handler.
//
// An app registers its jobs by name and hands control to Baton:
//
//	func main() {
//		app := baton.New()
//		app.Register("export", exportJob{})
//		app.Main()
//	}
//
// Main reads the settings (BATON_* app settings, see docs/configuration.md), serves the Functions
// host's invocations, and exits with a message naming what is wrong when it cannot start.
//
// What Baton guarantees: one run per schedule occurrence (or manual request), however many
// instances fire; every partition a job plans is processed until it has exactly one recorded
// result; the report is aggregated once, after every partition has a result. What a job must
// guarantee in return: planning is deterministic (the same params and cursor give the same
// partitions), Process may run more than once for a partition and must give the same result,
// Aggregate is a pure function of the results, and a Merge is associative. Package batontest
// checks all of these in a job author's own tests.
//
// A job is either a Job (JSON in and out, the raw interface) or built with TypedJob from
// functions over Go types, with the JSON handled by Baton and unknown params refused.
//
// Mistakes are errors, never panics: Register returns a *RegistrationError naming the job and
// the field, and Main and Run refuse to start while any registration failed, listing every
// problem at once.
package baton
