package dev.agentsidecar.toolserver;

import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * Marks a public method as a tool. Its parameters are the tool's arguments: their names (compile
 * with {@code -parameters}, or name each with {@link Arg}) and types give the input schema; a
 * {@link ToolContext} parameter is passed in and left out of it. Every flag defaults to the safe
 * choice: a tool is assumed to write, to be unsafe to retry and to need no approval.
 *
 * <pre>{@code
 * @Tool(name = "lookup_customer", description = "Look up a customer by id.", readOnly = true)
 * public Customer lookupCustomer(@Arg(description = "e.g. C-1001") String customerId) { ... }
 * }</pre>
 */
@Documented
@Retention(RetentionPolicy.RUNTIME)
@Target(ElementType.METHOD)
public @interface Tool {
  /** The name the model calls: 1 to 64 of {@code [A-Za-z0-9_-]}. Default: the method's name. */
  String name() default "";

  /** What the tool does and when to use it, for the model. Required. */
  String description();

  /** It changes nothing: may run concurrently with any reader, and early. */
  boolean readOnly() default false;

  /** Twice equals once: a failed call may be retried or hedged. */
  boolean idempotent() default false;

  /** Its effect cannot be undone. */
  boolean destructive() default false;

  /** A person approves each call before it runs. */
  boolean requiresApproval() default false;

  /** Resource keys it reads, such as {@code "sku:{sku}"}; {@code {field}} names an argument. */
  String[] readKeys() default {};

  /** Resource keys it writes; calls with a conflicting key run in the model's order. */
  String[] writeKeys() default {};

  /** Seconds one call may take when the caller sets nothing shorter; 0: the caller decides. */
  double timeoutSeconds() default 0;

  /** Seconds a result may be cached, read-only tools only; 0: never cached. */
  double cacheTtlSeconds() default 0;

  /** Free-form version, part of every cache key; "": the server's version. */
  String version() default "";

  /** The output fields the model needs ({@code "status"}, {@code "parcel.eta"}); {}: all. */
  String[] resultFields() default {};
}
