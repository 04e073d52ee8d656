package baton

import (
	"encoding/json"
	"fmt"

	jsonparams "github.com/batonfn/baton/internal/params"
)

// JobOption configures one registration (see Register). A bad option is a *RegistrationError
// from Register, naming the field.
type JobOption func(*jobSpec) error

// jobSpec is a registration being built by its options.
type jobSpec struct {
	job    Job
	params json.RawMessage
	field  string // the field check found wrong
}

// WithDefaultParams gives the job params for a run that names it without any: the timer's
// run when BATON_JOB names the job and BATON_JOB_PARAMS is unset, and a manual run that names
// the job and sends no params. params is a JSON object (json.RawMessage, []byte or string) or
// a Go value that encodes to one; the job's ParamsValidator must accept it. Default: none, so
// such a run gets no params.
func WithDefaultParams(params any) JobOption {
	return func(s *jobSpec) error {
		raw, err := jsonparams.Object(params)
		if err != nil {
			return &RegistrationError{Field: "params", Err: fmt.Errorf("%w: %w", ErrInvalidParams, err)}
		}
		s.params = raw
		return nil
	}
}

// check validates the registration as its options left it.
func (s *jobSpec) check() error {
	if s.params == nil {
		return nil
	}
	if v, ok := s.job.(ParamsValidator); ok {
		if err := v.ValidateParams(s.params); err != nil {
			s.field = "params"
			return fmt.Errorf("%w: %w", ErrInvalidParams, err)
		}
	}
	return nil
}
