//===- Passes.td - Graph passes over the sluice dialect ------*- tablegen -*-===//
//
// Adding a pass: an entry here, one .cpp in compiler/lib/Transforms, a lit
// test tests/compiler/<cli-name>.mlir, and one line in compiler/CMakeLists.txt
// plus the list in Compiler.cpp that orders the graph passes.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_PASSES_TD
#define SLUICE_PASSES_TD

include "mlir/Pass/PassBase.td"

def EliminateNoops : Pass<"sluice-eliminate-noops"> {
  let summary = "Removes stages that provably do nothing";
  let description = [{
    Deletes stages whose output stream equals their input stream: `select`
    of every field in the existing order, `rename` of nothing (or of fields to
    themselves), `skip` of 0 records, `repeat` once, `shuffle` with a buffer
    of 1, `shard` into 1 shard, `prefetch` of 0 records, a `cast` to the
    element type the field already has, and a `transpose` whose permutation
    is the identity. With `remarks=true` every removal is reported as a
    remark at the stage's location (its line in the spec).

    ```mlir
    // before
    %skip = sluice.skip %in {count = 0 : i64} : !sluice.stream<...>
    sluice.output %skip : !sluice.stream<...>
    // after
    sluice.output %in : !sluice.stream<...>
    ```
  }];
  let statistics = [
    Statistic<"numRemoved", "removed-stages", "Number of stages removed">,
  ];
  let options = [
    Option<"emitRemarks", "remarks", "bool", /*default=*/"false",
           "Report every removed stage as a remark">,
  ];
}

#endif // SLUICE_PASSES_TD
