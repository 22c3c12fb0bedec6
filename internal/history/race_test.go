//go:build race

package history

// raceEnabled: the race detector slows TestMemoryBound's 8 million
// points tenfold and adds its own memory; it runs without it.
const raceEnabled = true
