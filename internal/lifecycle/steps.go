package lifecycle

import "github.com/vastrun/vastrun/internal/runstate"

// The journal's step names, as the core's steps write them (runstate
// owns them: it replays what they journal).
const (
	stepStart       = runstate.StepStart
	stepGate        = runstate.StepGate
	stepFreeze      = runstate.StepFreeze
	stepSelect      = runstate.StepSelect
	stepApprove     = runstate.StepApprove
	stepRent        = runstate.StepRent
	stepAdopt       = runstate.StepAdopt
	stepReady       = runstate.StepReady
	stepVerify      = runstate.StepVerify
	stepWork        = runstate.StepWork
	stepDestroy     = runstate.StepDestroy
	stepConfirm     = runstate.StepConfirm
	stepOutcome     = runstate.StepOutcome
	stepAlert       = runstate.StepAlert
	stepFailover    = runstate.StepFailover
	stepPaths       = runstate.StepPaths
	stepConnect     = runstate.StepConnect
	stepBid         = runstate.StepBid
	stepInterrupted = runstate.StepInterrupted
	stepResumed     = runstate.StepResumed
)
