/**
 * Which route a request reaches (functions/dead-letters-api/resolve.ts): a literal segment beats
 * `{id}`, a method the path does not take is a 405 naming exactly the methods it takes, HEAD goes
 * where GET does, an unknown path is a 404. And the API Gateway routes made from the same table.
 */
import { describe, expect, it } from "vitest";
import {
  createResolver,
  gatewayRoutes,
  HTTP_METHODS,
  type HttpMethod,
} from "../../functions/dead-letters-api/resolve.ts";
import { ROUTES, type RouteSpec, routePermissions } from "../../functions/dead-letters-api/routes.ts";

const resolve = createResolver();
const ID = "6f1d9a22-8b4e-4f07-b3c5-91e2d0a7f458";
const BASE = "/v1/core/dead-letters";
const concrete = (template: string) => template.replace(/\{[^}]+\}/g, ID);
const paths = [...new Set(ROUTES.map((route) => route.path))];
const methodsOf = (path: string) =>
  ROUTES.filter((route) => route.path === path).map((route) => route.method);

/** What `Allow` must list for a path of the table: its methods, HEAD beside GET. */
function allowFor(path: string): HttpMethod[] {
  const taken = new Set<string>(methodsOf(path));
  if (taken.has("GET")) taken.add("HEAD");
  return HTTP_METHODS.filter((method) => taken.has(method));
}

describe("resolving a request", () => {
  it("reaches every route with its own method and path, and HEAD reaches each GET route", () => {
    for (const route of ROUTES) {
      const found = resolve(route.method, concrete(route.path));
      expect(found, `${route.method} ${route.path}`).toMatchObject({ kind: "route", route });
      if (route.hasId) expect(found).toMatchObject({ pathParameters: { id: ID } });
      if (route.method === "GET") {
        expect(resolve("HEAD", concrete(route.path)), `HEAD ${route.path}`).toMatchObject({
          kind: "route",
          route,
        });
      }
    }
  });

  it.each([
    ["GET", `${BASE}/replay`, ["POST"]],
    ["GET", `${BASE}/discard`, ["POST"]],
    ["HEAD", `${BASE}/replay`, ["POST"]],
    ["GET", `${BASE}/replay/plan`, ["POST"]],
    ["GET", `${BASE}/discard/plan`, ["POST"]],
    ["PATCH", `${BASE}/replay`, ["POST"]],
    ["POST", `${BASE}/operations`, ["GET", "HEAD"]],
    ["POST", `${BASE}/stats`, ["GET", "HEAD"]],
    ["POST", `${BASE}/groups`, ["GET", "HEAD"]],
    ["GET", `${BASE}/operations/${ID}/cancel`, ["POST"]],
    ["GET", `${BASE}/${ID}/replay`, ["POST"]],
    ["DELETE", `${BASE}/${ID}`, ["GET", "HEAD"]],
    ["DELETE", BASE, ["GET", "HEAD"]],
    ["OPTIONS", BASE, ["GET", "HEAD"]],
    ["get", BASE, ["GET", "HEAD"]],
  ])("%s %s is 405, allowing exactly %j (a literal segment beats {id})", (method, path, allow) => {
    expect(resolve(method, path)).toEqual({ kind: "methodNotAllowed", path: expect.any(String), allow });
  });

  it("answers every method a path does not take with 405 and exactly that path's methods", () => {
    for (const path of paths) {
      for (const method of HTTP_METHODS) {
        const found = resolve(method, concrete(path));
        const takes = methodsOf(path).includes(method === "HEAD" ? "GET" : (method as RouteSpec["method"]));
        if (takes) expect(found.kind, `${method} ${path}`).toBe("route");
        else
          expect(found, `${method} ${path}`).toEqual({
            kind: "methodNotAllowed",
            path,
            allow: allowFor(path),
          });
      }
    }
  });

  it("prefers a literal at the first segment where two templates differ", () => {
    // operations/{id} against {id}/replay: "operations" is literal first.
    expect(resolve("GET", `${BASE}/operations/replay`)).toMatchObject({
      kind: "route",
      route: { operationId: "getBulkOperation" },
      pathParameters: { id: "replay" },
    });
    expect(resolve("POST", `${BASE}/operations/replay`)).toMatchObject({
      kind: "methodNotAllowed",
      path: `${BASE}/operations/{id}`,
    });
  });

  it("passes a segment that fits {id} to the route as sent, to be validated there", () => {
    expect(resolve("GET", `${BASE}/not-a-uuid`)).toMatchObject({
      kind: "route",
      route: { operationId: "getDeadLetter" },
      pathParameters: { id: "not-a-uuid" },
    });
  });

  it.each([
    "/v1/core/nothing-here",
    "/v1/core/dead-letter",
    `${BASE}//replay`,
    `${BASE}/${ID}/replay/again`,
    `${BASE}/operations/${ID}/cancel/now`,
    "/",
    "",
    "v1/core/dead-letters",
  ])("%j is not a path of the API (404)", (path) => {
    for (const method of HTTP_METHODS) expect(resolve(method, path), method).toEqual({ kind: "notFound" });
  });

  it("takes exactly the paths of the table: a trailing slash is not one", () => {
    for (const path of paths) {
      for (const method of HTTP_METHODS) {
        expect(resolve(method, `${concrete(path)}/`), `${method} ${path}/`).toEqual({ kind: "notFound" });
      }
    }
  });

  it("refuses a table with two routes on one method and path, or two templates of one shape", () => {
    const [first] = ROUTES as [RouteSpec];
    expect(() => createResolver([first, first])).toThrow(/two routes for GET/);
    expect(() =>
      createResolver([
        { ...first, path: `${BASE}/{id}` },
        { ...first, path: `${BASE}/{other}`, method: "POST" },
      ]),
    ).toThrow(/same resource/);
  });
});

describe("the API Gateway routes", () => {
  const routes = gatewayRoutes();
  const key = (route: { method: string; path: string }) => `${route.method} ${route.path}`;

  it("are every method of every path of the table, once each", () => {
    const keys = routes.map(key);
    expect(new Set(keys).size).toBe(keys.length);
    expect(keys.sort()).toEqual(
      paths.flatMap((path) => HTTP_METHODS.map((method) => `${method} ${path}`)).sort(),
    );
  });

  it("give each route its permissions as scopes, HEAD its GET's, and the rest none", () => {
    for (const route of routes) {
      const spec = ROUTES.find(
        (r) => r.path === route.path && r.method === (route.method === "HEAD" ? "GET" : route.method),
      );
      expect(route.operation, key(route)).toBe(spec !== undefined);
      expect(route.scopes, key(route)).toEqual(spec ? [...routePermissions(spec)] : []);
    }
  });

  it("send the function only requests it resolves to the same path: an operation where they carry scopes, a 405 where not", () => {
    for (const route of routes) {
      const found = resolve(route.method, concrete(route.path));
      if (route.operation)
        expect(found, key(route)).toMatchObject({ kind: "route", route: { path: route.path } });
      else expect(found, key(route)).toMatchObject({ kind: "methodNotAllowed", path: route.path });
    }
  });
});
