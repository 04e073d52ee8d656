package app

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonfn/baton/internal/engine/config"
	"github.com/batonfn/baton/internal/engine/transport/storagequeue"
	"github.com/batonfn/baton/internal/tools/azurite"
	"github.com/batonfn/baton/work"
)

// baton deadletters against the Storage-queue transport on Azurite: it counts the poison
// messages of both queues, peeks them with the run and partition they belong to, refuses a
// purge that names no queue, and purges the one named.
func TestDeadLettersCmd_StorageQueue(t *testing.T) {
	srv := azurite.Shared(t)
	workQ, controlQ := azurite.UniqueName(t, "work"), azurite.UniqueName(t, "ctl")
	env := map[string]string{
		config.SettingHostStorage:  srv.ConnectionString(),
		config.SettingTransport:    "queue",
		config.SettingWorkQueue:    workQ,
		config.SettingControlQueue: controlQ,
	}
	getenv := func(k string) string { return env[k] }
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	poison := azurite.NewQueue(t, workQ+storagequeue.PoisonSuffix)
	if _, err := poison.Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		body, err := work.Envelope{Version: work.EnvelopeVersion, Kind: work.KindPartition, Run: "manual-r1", Epoch: 3, Part: i,
			Parts: 2, Payload: json.RawMessage(`{"i":1}`)}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := poison.EnqueueMessage(ctx, base64.StdEncoding.EncodeToString(body), nil); err != nil {
			t.Fatal(err)
		}
	}
	baton := func(args ...string) (string, error) {
		var out strings.Builder
		err := deadLetters(ctx, args, getenv, &out)
		return out.String(), err
	}

	out, err := baton("deadletters")
	if want := workQ + "\t2 dead letters\n" + controlQ + "\t0 dead letters\n"; err != nil || out != want {
		t.Errorf("count: got %q, %v want %q", out, err, want)
	}

	out, err = baton("deadletters", "peek", "-queue", workQ, "-n", "5")
	if err != nil {
		t.Fatalf("peek: %v", err)
	}
	var parts []int
	for sc := bufio.NewScanner(strings.NewReader(out)); sc.Scan(); {
		var l struct {
			Queue, Kind, Run, ID string
			Part                 *int
			Body                 map[string]any
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("peek line %q: %v", sc.Text(), err)
		}
		if l.Queue != workQ || l.Kind != "partition" || l.Run != "manual-r1" || l.Part == nil || l.ID == "" || l.Body["run"] != "manual-r1" {
			t.Errorf("peek line %s: want the work queue, run manual-r1, a partition and its body", sc.Text())
			continue
		}
		parts = append(parts, *l.Part)
	}
	if len(parts) != 2 || parts[0] != 0 || parts[1] != 1 {
		t.Errorf("peeked partitions %v, want [0 1]", parts)
	}

	if _, err := baton("deadletters", "purge"); err == nil || !strings.Contains(err.Error(), "-queue") {
		t.Errorf("purge without -queue: got %v, want an error asking for -queue", err)
	}
	if _, err := baton("deadletters", "count", "-queue", "nope"); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("an unknown queue: got %v, want an error naming it", err)
	}
	out, err = baton("deadletters", "purge", "-queue", workQ)
	if want := "purged 2 dead letters of queue " + workQ + "\n"; err != nil || out != want {
		t.Errorf("purge: got %q, %v want %q", out, err, want)
	}
	out, err = baton("deadletters", "-queue", workQ)
	if want := workQ + "\t0 dead letters\n"; err != nil || out != want {
		t.Errorf("count after purge: got %q, %v want %q", out, err, want)
	}
}

func TestDeadLettersCmd_Usage(t *testing.T) {
	for _, args := range [][]string{nil, {"runs"}, {"deadletters", "drop"}} {
		var out strings.Builder
		err := deadLetters(t.Context(), args, func(string) string { return "" }, &out)
		if !errors.Is(err, errUsage) || !strings.Contains(out.String(), "baton deadletters peek") {
			t.Errorf("baton %v: got %v and %q, want the usage", args, err, out.String())
		}
	}
	var out strings.Builder
	err := deadLetters(t.Context(), []string{"deadletters"}, func(k string) string {
		return map[string]string{config.SettingTransport: "kafka"}[k]
	}, &out)
	if err == nil || !strings.Contains(err.Error(), config.SettingTransport) {
		t.Errorf("an unknown transport: got %v, want an error naming %s", err, config.SettingTransport)
	}
}
