package dev.agentsidecar.toolserver;

/**
 * A call's identity does not verify; the message says why (never the token), and the call ends
 * UNAUTHENTICATED with it before its tool runs.
 */
final class IdentityRefused extends Exception {
  private static final long serialVersionUID = 1L;

  IdentityRefused(String message) {
    super(message, null, false, false); // a refusal is an answer, not a bug: no stack
  }
}
