package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

// TestRunCmd_TimerFlag: -timer accepts only all and one, and says so.
func TestRunCmd_TimerFlag(t *testing.T) {
	err := runCmd(context.Background(), []string{"-timer", "each", "-app", t.TempDir()}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-timer") || !strings.Contains(err.Error(), `"one"`) {
		t.Errorf("runCmd -timer each: %v, want an error naming -timer and its values", err)
	}
}
