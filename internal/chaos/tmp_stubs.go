package chaos

import (
	"context"
	"errors"
	"io"
)

func runLongTx(ctx context.Context, cfg Config, out io.Writer) (*verdict, error) {
	return nil, errors.New("x")
}
func runDeadGroup(ctx context.Context, cfg Config, out io.Writer) error { return errors.New("x") }
func runFailover(ctx context.Context, cfg Config, out io.Writer, sync bool) (*verdict, error) {
	return nil, errors.New("x")
}
