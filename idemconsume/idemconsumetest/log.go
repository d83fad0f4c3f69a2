package idemconsumetest

import "log/slog"

var quietLogger = slog.New(slog.DiscardHandler)
