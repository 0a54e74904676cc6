package runner

import (
	"io"

	"github.com/gpu-mode/kbgen/noise"
	"github.com/gpu-mode/kbgen/resultfile"
	"github.com/gpu-mode/kbgen/seal"
)

// readKey reads the job's result key from Stdin when the run is sealed,
// first thing, before any submission process exists, and closes stdin:
// what the submission inherits is /dev/null, and the pipe is empty.
func (o RunOptions) readKey() (seal.Key, error) {
	if o.Sealed == nil {
		return seal.Key{}, nil
	}
	if o.PayloadFile == "-" || o.Stdin == nil {
		return seal.Key{}, usageFault("--sealed reads the result key from stdin: the payload must come from a file")
	}
	k, err := seal.ReadKey(o.Stdin)
	if c, ok := o.Stdin.(io.Closer); ok {
		_ = c.Close()
	}
	if err != nil {
		return seal.Key{}, usageFault("%w", err)
	}
	return k, nil
}

// seal writes the result and the noise record, as marshalled here (never
// read back from the out dir, which the submission can write), to the
// Sealed writer.
func (o RunOptions) seal(k seal.Key, out Outcome) error {
	if o.Sealed == nil || out.Result == nil {
		return nil
	}
	var c seal.Contents
	var err error
	if c.Result, err = resultfile.Marshal(out.Result); err != nil {
		return err
	}
	if out.Noise != nil {
		if c.Noise, err = noise.Marshal(out.Noise); err != nil {
			return err
		}
	}
	return seal.Write(o.Sealed, k, c)
}
