package quota

import (
	"testing"

	"github.com/lagbridge/lagbridge/internal/importcheck"
)

// TestShortFuncs: no function of quota/ over 80 lines (the controller's
// rules are read one named step at a time), as in engine and producerclient.
func TestShortFuncs(t *testing.T) { importcheck.ShortFuncs(t, ".", 80) }
