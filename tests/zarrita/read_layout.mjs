// Print one layout of a store as JSON, read with zarrita: the group's attributes and the whole
// of data, indices and indptr. Usage: node read_layout.mjs STORE LAYOUT_PATH
import FileSystemStore from "@zarrita/storage/fs";
import * as zarr from "zarrita";

const [store, layout] = process.argv.slice(2);
const root = zarr.root(new FileSystemStore(store));
const group = await zarr.open(root.resolve(layout), { kind: "group" });
const out = { attrs: group.attrs };
for (const name of ["data", "indices", "indptr"]) {
  const array = await zarr.open(root.resolve(`${layout}/${name}`), { kind: "array" });
  const chunk = await zarr.get(array);
  out[name] = { dtype: array.dtype, chunks: array.chunks, values: Array.from(chunk.data, Number) };
}
process.stdout.write(JSON.stringify(out));
