//go:build !race

package gobgp

const gobgpRaces = false
