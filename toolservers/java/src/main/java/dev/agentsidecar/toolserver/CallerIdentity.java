package dev.agentsidecar.toolserver;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.TreeMap;

/**
 * Who a call serves, as the sidecar says; with {@code verified}, as the signature of its identity
 * assertion proves. Unverified, anything that reaches the server could have sent it: use it for
 * logs and defaults, not for decisions, unless the network between the sidecar and the server is
 * trusted. Immutable.
 *
 * @param principal the principal's name; empty for the sidecar's anonymous principal (or no sidecar)
 * @param sessionId the session's id, as the sidecar's caller knows it
 * @param runId the run (turn) the call belongs to
 * @param callId the call's id
 * @param labels the session's labels; empty when it has none, or too many to send ({@code labelsOmitted})
 * @param labelsOmitted the session has labels, but too many to send (over 2 KiB of JSON)
 * @param verified the identity comes from an assertion whose signature, issuer, audience and
 *     lifetime this server verified, and the plain metadata agrees with it
 * @param claims the verified assertion's claims ({@code iss}, {@code sub}, {@code aud}, {@code
 *     exp}, {@code jti}...) as JSON values: String, Long or BigInteger, Double, Boolean, null,
 *     List and Map; empty when not verified
 */
public record CallerIdentity(
    String principal,
    String sessionId,
    String runId,
    String callId,
    Map<String, String> labels,
    boolean labelsOmitted,
    boolean verified,
    Map<String, Object> claims) {

  public CallerIdentity {
    principal = principal == null ? "" : principal;
    sessionId = sessionId == null ? "" : sessionId;
    runId = runId == null ? "" : runId;
    callId = callId == null ? "" : callId;
    labels = labels == null || labels.isEmpty() ? Map.of() : Collections.unmodifiableMap(new TreeMap<>(labels));
    claims = claims == null || claims.isEmpty() ? Map.of() : Collections.unmodifiableMap(new LinkedHashMap<>(claims));
  }
}
