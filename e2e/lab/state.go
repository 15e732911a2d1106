package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// stateFile is the name of the lab's record of what it created, in StateDir.
const stateFile = "state.json"

// state is everything a lab created that must be removed again. It is written
// before each resource is created, so a crash leaves enough to clean up.
type state struct {
	Config     Config       `json:"config"`
	Namespaces []string     `json:"namespaces"`
	Dirs       []string     `json:"dirs"` // absolute directories outside StateDir to remove (FRR)
	Processes  []procRecord `json:"processes"`
	// ProxyPort is the loopback proxy's port in the root namespace, 0 when none runs.
	ProxyPort int `json:"proxyPort,omitempty"`
	// HeraldBinDir is the absolute directory of the controller and speaker
	// binaries InstallHerald ran, for OpenHerald (herald-lab
	// restart-speaker); "" when Herald was not installed.
	HeraldBinDir string `json:"heraldBinDir,omitempty"`
}

// procRecord identifies one long-lived process. StartTime (clock ticks since
// boot, /proc/<pid>/stat field 22) guards against killing a recycled PID.
type procRecord struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	PID       int    `json:"pid"`
	StartTime uint64 `json:"startTime"`
	Log       string `json:"log"`
}

func readState(dir string) (*state, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("read %s: %w", filepath.Join(dir, stateFile), err)
	}
	return &st, nil
}

// save writes st atomically (temp file + rename).
func (st *state) save() error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	p := filepath.Join(st.Config.StateDir, stateFile)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if err := os.Rename(tmp, p); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

func removeState(dir string) error {
	err := os.Remove(filepath.Join(dir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
