package dev.agentsidecar.client;

import dev.agentsidecar.v1.ApprovalRequired;

/**
 * Decides on tool calls that wait for approval during a streamed run.
 *
 * <p>The client calls it once for each {@code approval_required} event, on the client's approval
 * executor (never on a gRPC thread, so it may block, for example to ask a person), and sends the
 * decision with {@code ApproveToolCall}. The event is still delivered to the stream's consumer.
 * When the handler throws, or the decision cannot be delivered, the run is cancelled and the
 * stream fails with that error.
 */
@FunctionalInterface
public interface ApprovalHandler {
  /** The decision on {@code request}'s tool call. */
  Approval decide(ApprovalRequired request) throws Exception;
}
