// Package examples tests the example apps in this folder, each its own module written by `baton
// init`: that each still matches what the scaffold writes, and that each runs one occurrence of
// its job end to end under the local host against Azurite.
package examples
