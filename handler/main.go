// Command baton is Baton's reference app: the Azure Functions custom handler with the two
// built-in jobs, written only against the public API (package baton), as any app would be.
// `baton validate` checks the Baton settings of an azd environment and exits; `baton
// deadletters` counts, shows and purges the queues' dead letters.
package main

import "github.com/batonfn/baton"

func main() {
	app := baton.New()
	registerJobs(app)
	app.Main()
}
