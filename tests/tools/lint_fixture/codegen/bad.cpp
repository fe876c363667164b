// The lint's own test (tests/CMakeLists.txt, lint_no_default_catches): a `default:` it must report.
// default: in a comment is not reported, nor a marked one.
int pick(int x) {
  switch (x) {
  case 0: return 1;
  default: return 0;
  }
}
int marked(int x) {
  switch (x) {
  case 0: return 1;
  default: return 0; // default-ok: the fixture's allowed case
  }
}
