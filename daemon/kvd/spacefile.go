package kvd

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/ndma/ndma/internal/secretfile"
)

// Space is what a space file holds: a key space's name and its pool
// region's id and key (the capability to read and write it).
type Space struct {
	Name   string
	Region uint32
	Key    uint64
}

// spaceJSON is a space file's content.
type spaceJSON struct {
	Space  string `json:"space"`
	Region uint32 `json:"region"`
	Key    string `json:"key"` // 0x and 16 hex digits
}

// maxSpaceFile bounds a space file's size.
const maxSpaceFile = 4096

// WriteSpaceFile writes sp to a new file at path that only its owner may
// read; an existing file is not overwritten.
func WriteSpaceFile(path string, sp Space) error {
	b, err := json.MarshalIndent(spaceJSON{Space: sp.Name, Region: sp.Region, Key: fmt.Sprintf("0x%016x", sp.Key)}, "", "  ")
	if err != nil {
		return err
	}
	return secretfile.WriteNew(path, "space file", append(b, '\n'))
}

// ReadSpaceFile reads a space file; it must be private to its owner.
func ReadSpaceFile(path string) (Space, error) {
	b, err := secretfile.ReadFile(path, "space file")
	if err != nil {
		return Space{}, err
	}
	if len(b) > maxSpaceFile {
		return Space{}, fmt.Errorf("%s: a space file of %d bytes (at most %d)", path, len(b), maxSpaceFile)
	}
	var j spaceJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return Space{}, fmt.Errorf("%s: not a space file: %w", path, err)
	}
	key, err := strconv.ParseUint(j.Key, 0, 64)
	if err != nil || key == 0 || j.Region == 0 {
		return Space{}, fmt.Errorf("%s: not a space file: region %d, key %q", path, j.Region, j.Key)
	}
	if err := CheckSpace(j.Space); err != nil {
		return Space{}, fmt.Errorf("%s: %w", path, errors.Unwrap(err))
	}
	return Space{Name: j.Space, Region: j.Region, Key: key}, nil
}
