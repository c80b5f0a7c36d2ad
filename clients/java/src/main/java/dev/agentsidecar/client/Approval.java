package dev.agentsidecar.client;

import dev.agentsidecar.v1.ApprovalDecision;
import java.util.Objects;

/**
 * A decision on a tool call that waits for approval: run it, or deny it with a reason the model
 * sees.
 *
 * @param decision {@code APPROVAL_DECISION_APPROVE} or {@code APPROVAL_DECISION_DENY}
 * @param reason why, shown to the model when the call is denied; may be empty
 */
public record Approval(ApprovalDecision decision, String reason) {
  public Approval {
    Objects.requireNonNull(decision, "decision");
    Objects.requireNonNull(reason, "reason");
    if (decision != ApprovalDecision.APPROVAL_DECISION_APPROVE
        && decision != ApprovalDecision.APPROVAL_DECISION_DENY) {
      throw new IllegalArgumentException("decision must be APPROVE or DENY, not " + decision);
    }
  }

  /** Run the call. */
  public static Approval approve() {
    return new Approval(ApprovalDecision.APPROVAL_DECISION_APPROVE, "");
  }

  /** Do not run the call; the model sees it as denied, with {@code reason}. */
  public static Approval deny(String reason) {
    return new Approval(ApprovalDecision.APPROVAL_DECISION_DENY, reason);
  }
}
