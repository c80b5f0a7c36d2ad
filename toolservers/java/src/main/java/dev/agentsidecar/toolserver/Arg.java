package dev.agentsidecar.toolserver;

import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/** Describes a tool's argument (a parameter) or a field of a record argument, for the model. */
@Documented
@Retention(RetentionPolicy.RUNTIME)
@Target({ElementType.PARAMETER, ElementType.RECORD_COMPONENT, ElementType.FIELD})
public @interface Arg {
  /** The argument's name; default: the parameter's name (compiled with {@code -parameters}). */
  String name() default "";

  /** What the argument is, for the model. */
  String description() default "";
}
