// libFuzzer target: a tar archive walk over arbitrary bytes (ustar, GNU long names, pax 'x' and 'g' headers,
// base-256 sizes), reading each member's data as the WebDataset reader does. Every member must lie inside the
// file, each walk must make progress (no loop on a crafted size), and errors are named Status values.
#include <cstdint>
#include <vector>

#include "fuzz_util.hpp"
#include "vlpar/data/tar_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const vlpar::fuzz::MemFile file(data, size);
  auto opened = vlpar::data::TarFile::open(file.path());
  if (!opened.ok()) return 0;
  const vlpar::data::TarFile& tar = opened.value();
  vlpar::data::TarPaxGlobals globals = tar.leading_globals();
  int64_t offset = tar.first_member_offset();
  std::vector<uint8_t> buffer;
  for (int members = 0; members < 10000; ++members) {
    auto member = tar.member_at(offset, globals);
    if (!member.ok() || !member.value().has_value()) return 0;
    const vlpar::data::TarMember& m = *member.value();
    if (m.data_offset < 0 || m.size < 0 || m.data_offset + m.size > tar.file_size()) vlpar::fuzz::violated();
    if (m.next_offset <= offset || m.next_offset % 512 != 0) vlpar::fuzz::violated();  // a walk always advances
    buffer.resize(static_cast<size_t>(m.size));
    if (!tar.read(m.data_offset, buffer).ok()) vlpar::fuzz::violated();  // inside the file: must read
    offset = m.next_offset;
  }
  return 0;
}
