//go:build race

package gobgp

// gobgpRaces: gobgp v3.37 itself has data races that the race detector
// reports when two gobgp servers share a process, as the in-process router
// tests do: StartBgp writes package globals (table.SelectionOptions,
// table.UseMultiplePaths) read by every server's goroutines, and ListPath
// reads Path.stale outside the server loop while graceful restart marks
// paths stale. Production runs one server per process.
const gobgpRaces = true
