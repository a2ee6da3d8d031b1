/**
 * Which route a request reaches, from the ROUTES table alone, and the routes API Gateway needs so
 * that it sends the same requests to the function.
 *
 * A request's path is resolved to one resource first, then its method: of the templates the path
 * fits, the most specific wins, a literal segment beating `{id}` at the first segment where they
 * differ (so `/dead-letters/replay` is the bulk replay's resource, never a dead letter whose id is
 * "replay"). A method that resource does not take is a 405 naming exactly the methods it does
 * take; a path no template fits is a 404. HEAD is answered wherever GET is, by the GET route.
 */
import type { Permission } from "../../shared/http/auth.ts";
import { ROUTES, type RouteSpec, routePermissions } from "./routes.ts";

/** The methods API Gateway routes (HttpMethod without ANY), in the order `Allow` lists them. */
export const HTTP_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] as const;

/** One of {@link HTTP_METHODS}. */
export type HttpMethod = (typeof HTTP_METHODS)[number];

/** Where a request goes. */
export type Resolution =
  | {
      readonly kind: "route";
      readonly route: RouteSpec;
      /** The path's `{name}` segments, as sent (not decoded). */
      readonly pathParameters: Readonly<Record<string, string>>;
    }
  | { readonly kind: "methodNotAllowed"; readonly path: string; readonly allow: readonly HttpMethod[] }
  | { readonly kind: "notFound" };

/** A path template's segments, each a literal or a `{name}` parameter. */
type Segment = { readonly literal: string } | { readonly parameter: string };

interface Resource {
  readonly path: string;
  readonly segments: readonly Segment[];
  /** Per segment, 0 for a literal and 1 for a parameter: the smallest key is the most specific. */
  readonly specificity: string;
  readonly byMethod: ReadonlyMap<string, RouteSpec>;
}

function segmentsOf(template: string): Segment[] {
  return template
    .split("/")
    .slice(1)
    .map((part) => {
      const parameter = /^\{([^{}/]+)\}$/.exec(part)?.[1];
      return parameter !== undefined ? { parameter } : { literal: part };
    });
}

/** The methods a resource takes, HEAD included where GET is, in {@link HTTP_METHODS} order. */
function allowedOf(resource: Resource): HttpMethod[] {
  return HTTP_METHODS.filter(
    (method) => resource.byMethod.has(method) || (method === "HEAD" && resource.byMethod.has("GET")),
  );
}

/** The resources of a route table; two routes on one method and path, or two templates of the same shape, throw. */
function resourcesOf(routes: readonly RouteSpec[]): Resource[] {
  const byPath = new Map<string, Map<string, RouteSpec>>();
  for (const route of routes) {
    const methods = byPath.get(route.path) ?? new Map<string, RouteSpec>();
    if (methods.has(route.method)) throw new Error(`two routes for ${route.method} ${route.path}`);
    methods.set(route.method, route);
    byPath.set(route.path, methods);
  }
  const resources = [...byPath].map(([path, byMethod]) => {
    const segments = segmentsOf(path);
    return {
      path,
      segments,
      specificity: segments.map((s) => ("literal" in s ? "0" : "1")).join(""),
      byMethod,
    };
  });
  const shapes = new Map<string, string>();
  for (const resource of resources) {
    const shape = resource.segments.map((s) => ("literal" in s ? s.literal : "{}")).join("/");
    const other = shapes.get(shape);
    if (other !== undefined) throw new Error(`${resource.path} and ${other} are the same resource`);
    shapes.set(shape, resource.path);
  }
  return resources;
}

/** A resolver for `routes`, checked once when made. */
export function createResolver(
  routes: readonly RouteSpec[] = ROUTES,
): (method: string, path: string) => Resolution {
  const resources = resourcesOf(routes);
  return (method, path) => {
    // Exactly the paths of the table: no empty segment, so no trailing slash either. A request
    // that reaches the function by API Gateway's $default route is then never an operation.
    const parts = path.split("/");
    if (parts[0] !== "" || parts.slice(1).some((part) => part === "")) return { kind: "notFound" };
    const sent = parts.slice(1);
    let best: { resource: Resource; parameters: Record<string, string> } | undefined;
    for (const resource of resources) {
      if (resource.segments.length !== sent.length) continue;
      if (best !== undefined && best.resource.specificity <= resource.specificity) continue;
      const parameters: Record<string, string> = {};
      const fits = resource.segments.every((segment, i) => {
        const part = sent[i] ?? "";
        if ("literal" in segment) return segment.literal === part;
        parameters[segment.parameter] = part;
        return true;
      });
      if (fits) best = { resource, parameters };
    }
    if (best === undefined) return { kind: "notFound" };
    const route = best.resource.byMethod.get(method === "HEAD" ? "GET" : method);
    if (route === undefined) {
      return { kind: "methodNotAllowed", path: best.resource.path, allow: allowedOf(best.resource) };
    }
    return { kind: "route", route, pathParameters: best.parameters };
  };
}

/**
 * One API Gateway route: a route key, whether the function answers it with an operation, and the
 * scopes its JWT authorizer requires. A route without an operation has no authorizer.
 */
export interface GatewayRoute {
  readonly method: HttpMethod;
  readonly path: string;
  /** Whether the function answers it with an operation (else only with a 405 problem). */
  readonly operation: boolean;
  /** The permissions the authorizer requires one of; empty where there is no operation. */
  readonly scopes: readonly Permission[];
}

/**
 * The routes API Gateway needs so the function answers every request of the API's paths itself:
 * each route with its permissions as scopes, HEAD beside each GET with the same scopes, and every
 * other method of each path, so a literal path's missing GET does not fall through to `{id}`'s GET
 * (API Gateway picks a route by method and path together) and a method a path does not take is the
 * API's 405, not the gateway's 404. Those routes, like `$default` (paths the API does not have),
 * need no authorizer: the function answers them 405 or 404 before it reads a token, and verifies
 * the token itself before any operation, whatever route a request came by.
 */
export function gatewayRoutes(routes: readonly RouteSpec[] = ROUTES): GatewayRoute[] {
  const result: GatewayRoute[] = [];
  for (const resource of resourcesOf(routes)) {
    for (const method of HTTP_METHODS) {
      const route = resource.byMethod.get(method === "HEAD" ? "GET" : method);
      result.push({
        method,
        path: resource.path,
        scopes: route ? [...routePermissions(route)] : [],
        operation: route !== undefined,
      });
    }
  }
  return result;
}
