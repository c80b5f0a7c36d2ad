package dev.agentsidecar.toolserver;

/**
 * A call's identity does not verify; the message says why (never the token), and the call ends
 * UNAUTHENTICATED with it before its tool runs.
 */
final class IdentityRefused extends Exception {
  private static final long serialVersionUID = 1L;

  /** The kid the assertion named when no key has it (a reason to fetch the keys again); else null. */
  final String unknownKid;

  IdentityRefused(String message) {
    this(message, null);
  }

  IdentityRefused(String message, String unknownKid) {
    super(message, null, false, false); // a refusal is an answer, not a bug: no stack
    this.unknownKid = unknownKid;
  }
}
