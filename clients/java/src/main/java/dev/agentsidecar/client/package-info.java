/**
 * A client for the agent sidecar's {@code agentsidecar.v1.AgentService}.
 *
 * <p>{@link dev.agentsidecar.client.AgentClient} wraps the generated stubs (package {@code
 * dev.agentsidecar.v1}) with blocking and asynchronous calls, a deadline on every call,
 * approvals as a callback, cancellation, and failures as {@link
 * dev.agentsidecar.client.AgentSidecarException}, which carries the sidecar's error reason.
 */
package dev.agentsidecar.client;
