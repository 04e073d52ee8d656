// Package examples tests the example apps in this folder, each its own module written by `baton
// init`: that each still matches what the scaffold writes, and that each runs an occurrence of
// the schedule it declares end to end under the local host against Azurite.
package examples
