package dev.agentsidecar.toolserver;

import io.grpc.Context;
import io.grpc.Contexts;
import io.grpc.Metadata;
import io.grpc.ServerCall;
import io.grpc.ServerCallHandler;
import io.grpc.ServerInterceptor;
import io.grpc.Status;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;

/**
 * Puts each call's metadata in its context (for {@link ToolContext#metadata()}), and, with a
 * token configured, admits a tool call only with {@code authorization: Bearer TOKEN} (compared
 * as SHA-256 digests, in constant time); others end UNAUTHENTICATED before any tool runs. Only
 * the tool service is intercepted: health and reflection stay open.
 */
final class TokenCheck implements ServerInterceptor {
  static final Context.Key<Metadata> METADATA = Context.key("agentsidecar-call-metadata");
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);

  private final byte[] digest;

  TokenCheck(String token) {
    this.digest = token == null ? null : sha256(token);
  }

  @Override
  public <Q, R> ServerCall.Listener<Q> interceptCall(ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
    if (digest != null) {
      String value = headers.get(AUTHORIZATION);
      String sent = value != null && value.regionMatches(true, 0, "bearer ", 0, 7) ? value.substring(7).strip() : "";
      if (sent.isEmpty() || !MessageDigest.isEqual(sha256(sent), digest)) {
        call.close(Status.UNAUTHENTICATED.withDescription(
            "this server requires 'authorization: Bearer <token>' metadata with its token"), new Metadata());
        return new ServerCall.Listener<>() {};
      }
    }
    return Contexts.interceptCall(Context.current().withValue(METADATA, headers), call, headers, next);
  }

  private static byte[] sha256(String text) {
    try {
      return MessageDigest.getInstance("SHA-256").digest(text.getBytes(StandardCharsets.UTF_8));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }
}
