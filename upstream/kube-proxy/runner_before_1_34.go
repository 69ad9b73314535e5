//go:build kpsim_k8s_before_1_34

package kubeproxy

import (
	"time"

	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"

	"github.com/kpsim/kpsim/internal/private"
	"github.com/kpsim/kpsim/proxier/observed"
)

// burstSyncs is the burst the proxiers before 1.34 give their runner's limiter.
const burstSyncs = 2

// The sync runner's fields modelRunner reaches (fields.go).
const (
	runnerRun         = "syncRunner.run"
	runnerRetry       = "syncRunner.retry"
	runnerMinInterval = "syncRunner.minInterval"
	runnerTimer       = "syncRunner.timer"
	runnerLimiter     = "syncRunner.limiter"
)

var runnerFields = []string{runnerRun, runnerRetry, runnerMinInterval, runnerTimer, runnerLimiter}

// modelRunner puts the release's sync runner (pkg/util/async until 1.34
// rewrote it as pkg/proxy/runner, kubernetes PR #131615: one timer
// and a token-bucket limiter on the real clock, made by its constructor)
// on the modeled clock when the generation runs there: its timer becomes
// an observed.RunnerClock timer, its limiter the same token bucket on that
// clock, and it has a request when its run or retry channel holds one (its
// one select takes both along with the timer).
func modelRunner(p any, f *observed.Family) error {
	run, err := private.Field(p, runnerRun)
	if err != nil {
		return err
	}
	retry, err := private.Field(p, runnerRetry)
	if err != nil {
		return err
	}
	minInterval, err := private.Field(p, runnerMinInterval)
	if err != nil {
		return err
	}
	rc := f.RunnerClock(func(clock.Timer) bool { return run.Len() > 0 || retry.Len() > 0 })
	if rc == nil {
		return nil
	}
	timer := rc.Timer(0)
	timer.Stop() // as the release's constructor leaves it: consumed, not armed
	if err := private.Set(p, runnerTimer, timer); err != nil {
		return err
	}
	if d := time.Duration(minInterval.Int()); d > 0 {
		limiter := flowcontrol.NewTokenBucketRateLimiterWithClock(float32(time.Second)/float32(d), burstSyncs, rc)
		return private.Set(p, runnerLimiter, limiter)
	}
	return nil
}
