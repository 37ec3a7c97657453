// Package brokertest runs watermill's Pub/Sub conformance suite for the broker adapters.
package brokertest

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
)

// RunFunc runs one suite test.
type RunFunc func(t *testing.T, tctx tests.TestContext)

// RunSuite runs every test of watermill's tests.TestPubSub, in its order and with its
// parallelism; special replaces the run of the named tests (it may skip them, with a
// reason). Adapters use it where one suite test cannot run as TestPubSub runs it (a
// broker restart by external command, for example).
func RunSuite(t *testing.T, features tests.Features, newPubSub tests.PubSubConstructor,
	newGroupPubSub tests.ConsumerGroupPubSubConstructor, special map[string]RunFunc) {
	t.Helper()
	plain := func(fn func(*testing.T, tests.TestContext, tests.PubSubConstructor)) RunFunc {
		return func(t *testing.T, tctx tests.TestContext) { fn(t, tctx, newPubSub) }
	}
	suite := []struct {
		name     string
		run      RunFunc
		parallel bool
	}{
		{"TestPublishSubscribe", plain(tests.TestPublishSubscribe), true},
		{"TestConcurrentSubscribe", plain(tests.TestConcurrentSubscribe), true},
		{"TestConcurrentSubscribeMultipleTopics", plain(tests.TestConcurrentSubscribeMultipleTopics), true},
		{"TestResendOnError", plain(tests.TestResendOnError), true},
		{"TestNoAck", plain(tests.TestNoAck), true},
		{"TestContinueAfterSubscribeClose", plain(tests.TestContinueAfterSubscribeClose), true},
		{"TestConcurrentClose", plain(tests.TestConcurrentClose), true},
		{"TestContinueAfterErrors", plain(tests.TestContinueAfterErrors), true},
		{"TestPublishSubscribeInOrder", plain(tests.TestPublishSubscribeInOrder), true},
		{"TestPublisherClose", plain(tests.TestPublisherClose), true},
		{"TestTopic", plain(tests.TestTopic), true},
		{"TestMessageCtx", plain(tests.TestMessageCtx), true},
		{"TestSubscribeCtx", plain(tests.TestSubscribeCtx), true},
		{"TestNewSubscriberReceivesOldMessages", plain(tests.TestNewSubscriberReceivesOldMessages), true},
		{"TestReconnect", plain(tests.TestReconnect), false},
		{"TestConsumerGroups", func(t *testing.T, tctx tests.TestContext) {
			tests.TestConsumerGroups(t, tctx, newGroupPubSub)
		}, true},
	}
	for _, st := range suite {
		run := st.run
		if r, ok := special[st.name]; ok {
			run = r
		}
		t.Run(st.name, func(t *testing.T) {
			if st.parallel {
				t.Parallel()
			}
			id := tests.NewTestID()
			t.Run(id.String(), func(t *testing.T) {
				run(t, tests.TestContext{TestID: id, Features: features})
			})
		})
	}
}
