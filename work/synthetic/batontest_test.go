package synthetic_test

import (
	"strings"
	"testing"

	"github.com/batonfn/baton/batontest"
	"github.com/batonfn/baton/work/synthetic"
)

// The synthetic job keeps its side of the exactly-once contract, also when a tenth of its
// partitions fail on their first delivery and two fail permanently.
func TestSynthetic_Batontest(t *testing.T) {
	rep := batontest.Check(t, synthetic.New(), `{"partitions":40,"failOncePercent":10,"permanent":[3,17]}`)
	if rep.Partitions != 40 || rep.Succeeded != 38 || rep.Failed != 2 || !strings.Contains(rep.Failures[17], "permanently") {
		t.Errorf("report: %+v", rep)
	}
}
