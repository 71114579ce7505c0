package main

/*
#include "cgo.h"
*/
import "C"

import (
	"github.com/kvready/kvready/contract"
	"github.com/kvready/kvready/readiness"
)

// kvready.h spells out the values of package readiness and contract; a
// value that drifts from its Go counterpart does not compile. Each pair is
// checked both ways: uint of a negative constant is a compile error.
const (
	_ = uint(C.KVREADY_NUM_STATES - readiness.NumStates)
	_ = uint(readiness.NumStates - C.KVREADY_NUM_STATES)
	_ = uint(C.KVREADY_MAX_STATES - readiness.NumStates)
	_ = uint(C.KVREADY_MAX_STATES - readiness.NumOutcomes)

	_ = uint(C.KVREADY_WAITING - int(readiness.StateWaiting))
	_ = uint(int(readiness.StateWaiting) - C.KVREADY_WAITING)
	_ = uint(C.KVREADY_GRANTED - int(readiness.StateGranted))
	_ = uint(int(readiness.StateGranted) - C.KVREADY_GRANTED)
	_ = uint(C.KVREADY_STAGED - int(readiness.StateStaged))
	_ = uint(int(readiness.StateStaged) - C.KVREADY_STAGED)
	_ = uint(C.KVREADY_ADMITTED - int(readiness.StateAdmitted))
	_ = uint(int(readiness.StateAdmitted) - C.KVREADY_ADMITTED)
	_ = uint(C.KVREADY_REQUESTED - int(readiness.StateRequested))
	_ = uint(int(readiness.StateRequested) - C.KVREADY_REQUESTED)
	_ = uint(C.KVREADY_SERVED - int(readiness.StateServed))
	_ = uint(int(readiness.StateServed) - C.KVREADY_SERVED)
	_ = uint(C.KVREADY_PARTIAL - int(readiness.StatePartial))
	_ = uint(int(readiness.StatePartial) - C.KVREADY_PARTIAL)
	_ = uint(C.KVREADY_MISSED - int(readiness.StateMissed))
	_ = uint(int(readiness.StateMissed) - C.KVREADY_MISSED)
	_ = uint(C.KVREADY_FAILED_STATE - int(readiness.StateFailed))
	_ = uint(int(readiness.StateFailed) - C.KVREADY_FAILED_STATE)
	_ = uint(C.KVREADY_ACCESS_FENCED - int(readiness.StateAccessFenced))
	_ = uint(int(readiness.StateAccessFenced) - C.KVREADY_ACCESS_FENCED)
	_ = uint(C.KVREADY_COPY_UNPROVEN - int(readiness.StateCopyUnproven))
	_ = uint(int(readiness.StateCopyUnproven) - C.KVREADY_COPY_UNPROVEN)
	_ = uint(C.KVREADY_LOGICALLY_COMPLETE - int(readiness.StateLogicallyComplete))
	_ = uint(int(readiness.StateLogicallyComplete) - C.KVREADY_LOGICALLY_COMPLETE)
	_ = uint(C.KVREADY_CONTAINED - int(readiness.StateContained))
	_ = uint(int(readiness.StateContained) - C.KVREADY_CONTAINED)
	_ = uint(C.KVREADY_QUARANTINED - int(readiness.StateQuarantined))
	_ = uint(int(readiness.StateQuarantined) - C.KVREADY_QUARANTINED)
	_ = uint(C.KVREADY_RELEASED - int(readiness.StateReleased))
	_ = uint(int(readiness.StateReleased) - C.KVREADY_RELEASED)

	_ = uint(C.KVREADY_NUM_OUTCOMES - readiness.NumOutcomes)
	_ = uint(readiness.NumOutcomes - C.KVREADY_NUM_OUTCOMES)
	_ = uint(C.KVREADY_OUTCOME_NONE - int(readiness.NoOutcome))
	_ = uint(int(readiness.NoOutcome) - C.KVREADY_OUTCOME_NONE)
	_ = uint(C.KVREADY_OUTCOME_SERVED - int(readiness.Served))
	_ = uint(int(readiness.Served) - C.KVREADY_OUTCOME_SERVED)
	_ = uint(C.KVREADY_OUTCOME_PARTIAL - int(readiness.Partial))
	_ = uint(int(readiness.Partial) - C.KVREADY_OUTCOME_PARTIAL)
	_ = uint(C.KVREADY_OUTCOME_MISSED - int(readiness.Missed))
	_ = uint(int(readiness.Missed) - C.KVREADY_OUTCOME_MISSED)
	_ = uint(C.KVREADY_OUTCOME_FAILED - int(readiness.Failed))
	_ = uint(int(readiness.Failed) - C.KVREADY_OUTCOME_FAILED)
	_ = uint(C.KVREADY_OUTCOME_CANCELLED - int(readiness.Cancelled))
	_ = uint(int(readiness.Cancelled) - C.KVREADY_OUTCOME_CANCELLED)
	_ = uint(C.KVREADY_OUTCOME_REJECTED - int(readiness.Rejected))
	_ = uint(int(readiness.Rejected) - C.KVREADY_OUTCOME_REJECTED)
	_ = uint(C.KVREADY_OUTCOME_TIMEOUT - int(readiness.TimedOut))
	_ = uint(int(readiness.TimedOut) - C.KVREADY_OUTCOME_TIMEOUT)
	_ = uint(C.KVREADY_OUTCOME_VIOLATION - int(readiness.Violation))
	_ = uint(int(readiness.Violation) - C.KVREADY_OUTCOME_VIOLATION)

	_ = uint(C.KVREADY_NOT_EXPOSED - int(readiness.DispositionNotExposed))
	_ = uint(int(readiness.DispositionNotExposed) - C.KVREADY_NOT_EXPOSED)
	_ = uint(C.KVREADY_ACTIVE - int(readiness.DispositionActive))
	_ = uint(int(readiness.DispositionActive) - C.KVREADY_ACTIVE)
	_ = uint(C.KVREADY_QUIESCING - int(readiness.DispositionQuiescing))
	_ = uint(int(readiness.DispositionQuiescing) - C.KVREADY_QUIESCING)
	_ = uint(C.KVREADY_QUIESCED_SUCCESS - int(readiness.DispositionQuiescedSuccess))
	_ = uint(int(readiness.DispositionQuiescedSuccess) - C.KVREADY_QUIESCED_SUCCESS)
	_ = uint(C.KVREADY_QUIESCED_FAILURE - int(readiness.DispositionQuiescedFailure))
	_ = uint(int(readiness.DispositionQuiescedFailure) - C.KVREADY_QUIESCED_FAILURE)
	_ = uint(C.KVREADY_IN_DOUBT - int(readiness.DispositionInDoubt))
	_ = uint(int(readiness.DispositionInDoubt) - C.KVREADY_IN_DOUBT)

	_ = uint(C.KVREADY_LOGICAL_ACCEPTED - int(readiness.LogicalAccepted))
	_ = uint(int(readiness.LogicalAccepted) - C.KVREADY_LOGICAL_ACCEPTED)
	_ = uint(C.KVREADY_LOGICAL_ALREADY_TERMINAL - int(readiness.LogicalAlreadyTerminal))
	_ = uint(int(readiness.LogicalAlreadyTerminal) - C.KVREADY_LOGICAL_ALREADY_TERMINAL)
	_ = uint(C.KVREADY_LOGICAL_NOT_FOUND - int(readiness.LogicalNotFound))
	_ = uint(int(readiness.LogicalNotFound) - C.KVREADY_LOGICAL_NOT_FOUND)
	_ = uint(C.KVREADY_LOGICAL_REJECTED - int(readiness.LogicalRejected))
	_ = uint(int(readiness.LogicalRejected) - C.KVREADY_LOGICAL_REJECTED)

	_ = uint(C.KVREADY_FETCH - int(readiness.Fetch))
	_ = uint(int(readiness.Fetch) - C.KVREADY_FETCH)
	_ = uint(C.KVREADY_PUBLISH - int(readiness.Publish))
	_ = uint(int(readiness.Publish) - C.KVREADY_PUBLISH)
	_ = uint(C.KVREADY_UNTIL_SETTLED - int(readiness.UntilSettled))
	_ = uint(int(readiness.UntilSettled) - C.KVREADY_UNTIL_SETTLED)
	_ = uint(C.KVREADY_UNTIL_RELEASED - int(readiness.UntilReleased))
	_ = uint(int(readiness.UntilReleased) - C.KVREADY_UNTIL_RELEASED)

	_ = uint(C.KVREADY_CANCEL_UNSUPPORTED - int(contract.CancelUnsupported))
	_ = uint(int(contract.CancelUnsupported) - C.KVREADY_CANCEL_UNSUPPORTED)
	_ = uint(C.KVREADY_CANCEL_REQUESTED - int(contract.CancelRequested))
	_ = uint(int(contract.CancelRequested) - C.KVREADY_CANCEL_REQUESTED)

	_ = uint(C.KVREADY_POLICY_QUARANTINE - int(readiness.Quarantine))
	_ = uint(int(readiness.Quarantine) - C.KVREADY_POLICY_QUARANTINE)
	_ = uint(C.KVREADY_POLICY_FATAL - int(readiness.Fatal))
	_ = uint(int(readiness.Fatal) - C.KVREADY_POLICY_FATAL)
	_ = uint(C.KVREADY_POLICY_RECOVER - int(readiness.Recover))
	_ = uint(int(readiness.Recover) - C.KVREADY_POLICY_RECOVER)

	_ = uint(C.KVREADY_NAME_SIZE - contract.NameSize)
	_ = uint(contract.NameSize - C.KVREADY_NAME_SIZE)
)
