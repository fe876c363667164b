// kiln's second main job: train a character-level GPT on the text of Debian's fortunes package
// and report the validation loss in nats per character.
//
//   ./build/examples/gpt                          # 4 layers, 4 heads, 128 dims, context 64, batch 12, 2000 steps
//   ./build/examples/gpt --steps 200 --sample 300 --temperature 0.8 --top-k 10
//   ./build/examples/gpt --steps 1000 --checkpoint gpt.safetensors
//   ./build/examples/gpt --steps 2000 --checkpoint gpt.safetensors --resume
//
// The data: every fortune file, concatenated in name order; a character vocabulary; the first 90%
// for training and the rest for validation; batches of random windows drawn by a stateless
// generator (examples/gpt.h; bench/gpt_torch.py draws the same ones). A training step (forward,
// loss, backward, gradient clipping and AdamW's update) is one compiled function, replayed every
// step; the learning rate warms up linearly and then decays along a cosine.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <new>
#include <random>
#include <stdexcept>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "examples/gpt.h"
#include "cli.h"
#include "kiln/checkpoint.h"
#include "kiln/kiln.h"

using namespace kiln;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  gpt::Config model;
  int64_t steps = 2000;
  int64_t stop_at = 0; // > 0: stop after this step, as if interrupted
  int64_t batch = 12;
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup = -1; // -1: min(100, steps / 10)
  double weight_decay = 0.1;
  double clip = 1.0;
  int64_t eval_every = 250;
  int64_t eval_batches = 20;
  int64_t sample = 0;
  double temperature = 1.0;
  int64_t top_k = 0;
  bool fusion = true;
  bool eager = false;
  std::string checkpoint;
  bool resume = false;
  uint64_t seed = 0;
  std::string data = gpt::kFortunesDir;
};

void usage() {
  std::cerr << "usage: gpt [--steps N] [--batch N] [--context N] [--layers N] [--heads N] [--dim N] [--dropout P]\n"
               "           [--lr X] [--min-lr X] [--warmup N] [--weight-decay X] [--clip X] [--eval-every N]\n"
               "           [--eval-batches N] [--sample N] [--temperature T] [--top-k K] [--no-fusion] [--eager]\n"
               "           [--checkpoint PATH] [--resume] [--stop-at N] [--seed N] [--data DIR]\n"
               "  --steps         training steps (default 2000)\n"
               "  --batch         windows per step (default 12)\n"
               "  --context       characters per window, the model's block size (default 64)\n"
               "  --layers/--heads/--dim  transformer layers, heads and width (default 4, 4, 128)\n"
               "  --dropout       dropout probability (default 0.1)\n"
               "  --lr, --min-lr  AdamW's peak learning rate and the end of the cosine decay (1e-3, 1e-4)\n"
               "  --warmup        steps of linear warm-up (default 100, or a tenth of --steps when fewer)\n"
               "  --weight-decay  AdamW's decoupled weight decay (default 0.1)\n"
               "  --clip          clip the gradients' global 2-norm to this (default 1; 0: no clipping)\n"
               "  --eval-every    validation loss every N steps (default 250)\n"
               "  --eval-batches  batches of validation windows per evaluation (default 20)\n"
               "  --sample N      print N generated characters at the end (default 0)\n"
               "  --temperature   sampling temperature (default 1)\n"
               "  --top-k         sample among the k likeliest characters only (default 0: all)\n"
               "  --no-fusion     one kernel per primitive op (same results, slower)\n"
               "  --eager         build and schedule each step's graph instead of replaying the compiled step\n"
               "  --checkpoint    save model and optimizer state here at every evaluation and at the end\n"
               "  --resume        continue from --checkpoint (with --dropout 0, the same losses as an\n"
               "                  uninterrupted run; dropout masks are drawn afresh)\n"
               "  --stop-at N     stop after step N (saving the checkpoint), as if interrupted: tries --resume\n"
               "  --seed          initialization, batches and sampling seed (default 0)\n"
               "  --data          directory of the fortune files (default " << gpt::kFortunesDir << ")\n";
}

template <class T> T number(const std::string& flag, const char* text) { return cli::number<T>("gpt", flag, text); }

// The flags a resumed run must share with the checkpoint's (--steps may grow: training longer).
cli::RunFlags run_flags(const Args& a) {
  cli::RunFlags f;
  f.add("--batch", static_cast<long long>(a.batch)).add("--context", static_cast<long long>(a.model.context));
  f.add("--layers", static_cast<long long>(a.model.layers)).add("--heads", static_cast<long long>(a.model.heads));
  f.add("--dim", static_cast<long long>(a.model.dim)).add("--dropout", a.model.dropout).add("--lr", a.lr);
  f.add("--min-lr", a.min_lr).add("--warmup", static_cast<long long>(a.warmup)).add("--weight-decay", a.weight_decay);
  f.add("--clip", a.clip).add("--seed", static_cast<unsigned long long>(a.seed));
  return f;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto value = [&] { return cli::value("gpt", argc, argv, i); };
    if (f == "--steps") a.steps = number<int64_t>(f, value());
    else if (f == "--batch") a.batch = number<int64_t>(f, value());
    else if (f == "--context") a.model.context = number<int64_t>(f, value());
    else if (f == "--layers") a.model.layers = number<int64_t>(f, value());
    else if (f == "--heads") a.model.heads = number<int64_t>(f, value());
    else if (f == "--dim") a.model.dim = number<int64_t>(f, value());
    else if (f == "--dropout") a.model.dropout = number<double>(f, value());
    else if (f == "--lr") a.lr = number<double>(f, value());
    else if (f == "--min-lr") a.min_lr = number<double>(f, value());
    else if (f == "--warmup") a.warmup = number<int64_t>(f, value());
    else if (f == "--weight-decay") a.weight_decay = number<double>(f, value());
    else if (f == "--clip") a.clip = number<double>(f, value());
    else if (f == "--eval-every") a.eval_every = number<int64_t>(f, value());
    else if (f == "--eval-batches") a.eval_batches = number<int64_t>(f, value());
    else if (f == "--sample") a.sample = number<int64_t>(f, value());
    else if (f == "--temperature") a.temperature = number<double>(f, value());
    else if (f == "--top-k") a.top_k = number<int64_t>(f, value());
    else if (f == "--no-fusion") a.fusion = false;
    else if (f == "--eager") a.eager = true;
    else if (f == "--checkpoint") a.checkpoint = value();
    else if (f == "--resume") a.resume = true;
    else if (f == "--stop-at") a.stop_at = number<int64_t>(f, value());
    else if (f == "--seed") a.seed = number<uint64_t>(f, value());
    else if (f == "--data") a.data = value();
    else if (f == "--help" || f == "-h") usage(), std::exit(0);
    else {
      std::cerr << "gpt: unknown flag '" << f << "'\n";
      usage();
      std::exit(2);
    }
  }
  if (a.steps <= 0 || a.batch <= 0 || a.model.context <= 0 || a.model.layers < 0 || a.eval_every <= 0 ||
      a.eval_batches <= 0 || a.sample < 0 || a.top_k < 0 || !(a.lr > 0) || a.min_lr < 0 || a.clip < 0)
    throw Error("gpt", "--steps, --batch, --context, --eval-every, --eval-batches and --lr must be positive; "
                       "--layers, --sample, --top-k, --min-lr and --clip non-negative");
  if (a.warmup == -1) a.warmup = std::min<int64_t>(100, a.steps / 10);
  if (a.warmup < 0 || a.warmup >= a.steps) throw Error("gpt", "--warmup must be in [0, --steps)");
  if (!(a.temperature > 0) || !std::isfinite(a.temperature)) throw Error("gpt", "--temperature must be positive and finite");
  if (!std::isfinite(a.clip) || !std::isfinite(a.lr) || !std::isfinite(a.weight_decay) || !std::isfinite(a.min_lr))
    throw Error("gpt", "--lr, --min-lr, --weight-decay and --clip must be finite");
  if (a.min_lr > a.lr) throw Error("gpt", "--min-lr must be at most --lr");
  if (a.resume && a.checkpoint.empty()) throw Error("gpt", "--resume needs --checkpoint PATH");
  cli::check_checkpoint_dir("gpt", a.checkpoint);
  if (a.stop_at < 0 || a.stop_at > a.steps) throw Error("gpt", "--stop-at must be in [0, --steps]");
  return a;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// "\rstep  120/2000 [=====>        ]  8123 tokens/s  loss 2.1234" on stderr.
void progress(int64_t step, int64_t steps, double tokens_per_s, double loss) {
  constexpr int width = 30;
  const int filled = static_cast<int>(width * step / std::max<int64_t>(steps, 1));
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < width) bar += '>' + std::string(static_cast<size_t>(width - filled - 1), ' ');
  std::fprintf(stderr, "\rstep %5lld/%lld [%s] %8.0f tokens/s  loss %.4f", static_cast<long long>(step),
               static_cast<long long>(steps), bar.c_str(), tokens_per_s, loss);
  std::fflush(stderr);
}

// The graph of one training step; returns the loss.
Tensor build_step(gpt::GPT& model, optim::Optimizer& opt, double clip, const Tensor& x, const Tensor& y) {
  opt.zero_grad();
  Tensor loss = gpt::loss(model(x), y);
  loss.backward();
  if (clip > 0) nn::utils::clip_grad_norm_(model.parameters(), clip);
  opt.step();
  return loss.detach();
}

// `n` characters generated from a newline, sampled with `temperature` among the top_k likeliest.
std::string generate(gpt::GPT& model, const gpt::Vocab& vocab, const Args& a) {
  NoGradGuard no_grad;
  model.eval();
  std::mt19937_64 rng(a.seed);
  std::vector<int64_t> ids{vocab.ids['\n'] >= 0 ? vocab.ids['\n'] : 0};
  std::string out;
  for (int64_t i = 0; i < a.sample; ++i) {
    const int64_t t = std::min<int64_t>(static_cast<int64_t>(ids.size()), a.model.context);
    const std::vector<int64_t> window(ids.end() - t, ids.end());
    const Tensor logits = model(from_vector(window, {1, t})).narrow(1, t - 1, 1).flatten(); // the last position
    std::vector<double> l = logits.to_vector<double>();
    // the k likeliest: those at least the k-th largest logit (topk's last value; ties at it are kept)
    const bool top = a.top_k > 0 && a.top_k < static_cast<int64_t>(l.size());
    const double least = top ? topk(logits, a.top_k).first.to_vector<double>().back() : -INFINITY;
    for (double& v : l) v = v >= least ? v / a.temperature : -INFINITY;
    const double m = *std::max_element(l.begin(), l.end());
    for (double& v : l) v = std::exp(v - m);
    std::discrete_distribution<int64_t> pick(l.begin(), l.end());
    ids.push_back(pick(rng));
    out += static_cast<char>(vocab.chars[static_cast<size_t>(ids.back())]);
  }
  model.train();
  return out;
}

bool file_exists(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0;
}

int run(const Args& a) {
  options().fusion = a.fusion;
  const std::string text = gpt::read_corpus(a.data);
  if (text.size() < 1000)
    throw Error("gpt", "no fortune text in '" + a.data + "' (install Debian's fortunes package)");
  const gpt::Vocab vocab(text);
  const std::vector<int64_t> ids = vocab.encode(text);
  const auto split = static_cast<int64_t>(static_cast<double>(ids.size()) * 0.9);
  const std::vector<int64_t> train(ids.begin(), ids.begin() + split), val(ids.begin() + split, ids.end());
  // A window is context + 1 characters of one split (gpt::windows draws its start below size - context).
  if (a.model.context >= static_cast<int64_t>(val.size()))
    throw Error("gpt", "--context " + std::to_string(a.model.context) + " needs more text: the validation split of '" +
                           a.data + "' has " + std::to_string(val.size()) + " characters (at least context + 1)");

  gpt::Config config = a.model;
  config.vocab = vocab.size();
  nn::manual_seed(a.seed);
  gpt::GPT model(config);
  optim::AdamW opt(model.parameters(), {.lr = a.lr, .betas = {0.9, 0.99}, .weight_decay = a.weight_decay});
  optim::WarmupCosineLR schedule(opt, a.warmup, a.steps, a.min_lr);
  std::cout << "parameters: " << model.num_parameters() << ", vocabulary " << vocab.size() << ", characters: "
            << train.size() << " train, " << val.size() << " validation; " << config.layers << " layers, "
            << config.heads << " heads, " << config.dim << " dims, context " << config.context << ", batch " << a.batch
            << ", fusion " << (a.fusion ? "on" : "off") << (a.eager ? ", eager steps" : ", compiled steps") << std::endl;

  const int64_t last = a.stop_at > 0 ? a.stop_at : a.steps;
  int64_t first_step = 0;
  if (a.resume) {
    if (!file_exists(a.checkpoint)) throw Error("gpt", "--resume: no checkpoint at '" + a.checkpoint + "'");
    checkpoint::Metadata meta = checkpoint::load(a.checkpoint, model, &opt);
    if (meta["model"] != "gpt") throw Error("gpt", "'" + a.checkpoint + "' holds a '" + meta["model"] + "' model, not gpt");
    char* end = nullptr;
    first_step = std::strtoll(meta["step"].c_str(), &end, 10);
    if (meta["step"].empty() || *end != '\0' || first_step < 0)
      throw Error("gpt", "'" + a.checkpoint + "' has no valid \"step\" in its metadata");
    if (first_step >= last) // nothing to train; saving would write an earlier step over the checkpoint's
      throw Error("gpt", "'" + a.checkpoint + "' is at step " + std::to_string(first_step) + ", which --steps / --stop-at (" +
                             std::to_string(last) + ") does not go past: nothing to resume");
    if (const std::string diff = cli::resume_mismatch(meta["run"], run_flags(a)); !diff.empty())
      throw Error("gpt", "'" + a.checkpoint + "' was trained with other flags: " + diff +
                             "; resume with the same ones (or train afresh)");
    if (meta["steps"] != std::to_string(a.steps) && !meta["steps"].empty())
      std::cout << "note: the checkpoint's run had --steps " << meta["steps"] << "; the schedule now ends at "
                << a.steps << "\n";
    schedule.set_epoch(first_step);
    std::cout << "resumed from " << a.checkpoint << " after step " << first_step << "\n";
  }
  auto save = [&](int64_t step) {
    if (!a.checkpoint.empty())
      checkpoint::save(a.checkpoint, model, &opt,
                       {{"model", "gpt"},
                        {"step", std::to_string(step)},
                        {"steps", std::to_string(a.steps)},
                        {"run", run_flags(a).str()}});
  };

  CompiledFunction step = compile([&](const std::vector<Tensor>& xy) {
    return std::vector<Tensor>{build_step(model, opt, a.clip, xy[0], xy[1])};
  });
  constexpr uint64_t kValStream = 1000003; // the validation windows: the same at every evaluation
  const auto start = Clock::now();
  auto last_print = start;
  double loss_avg = 0, eval_secs = 0; // tokens/s counts training time only
  auto train_secs = [&] { return std::max(seconds_since(start) - eval_secs, 1e-9); };
  for (int64_t s = first_step; s < last; ++s) {
    auto [x, y] = gpt::windows(train, a.batch, config.context, a.seed, static_cast<uint64_t>(s));
    const Tensor loss = a.eager ? build_step(model, opt, a.clip, x, y) : step({x, y})[0];
    schedule.step();
    const double l = loss.item<double>();
    loss_avg = s == first_step ? l : 0.95 * loss_avg + 0.05 * l;
    if (seconds_since(last_print) > 0.2 || s + 1 == last) {
      const double tokens = static_cast<double>((s + 1 - first_step) * a.batch * config.context);
      progress(s + 1, a.steps, tokens / train_secs(), loss_avg);
      last_print = Clock::now();
    }
    if ((s + 1) % a.eval_every == 0 && s + 1 < last) {
      const auto eval_start = Clock::now();
      const double v = gpt::evaluate(model, val, a.batch, a.eval_batches, kValStream);
      eval_secs += seconds_since(eval_start);
      std::fprintf(stderr, "\n");
      std::printf("step %lld: train_loss %.4f  val_loss %.4f  lr %.2e  (%.1f s)\n", static_cast<long long>(s + 1),
                  loss_avg, v, opt.lr(), seconds_since(start));
      std::fflush(stdout);
      save(s + 1);
    }
  }
  std::fprintf(stderr, "\n");
  const double secs = train_secs();
  const double val_loss = gpt::evaluate(model, val, a.batch, a.eval_batches, kValStream);
  save(last);
  const double tokens = static_cast<double>((last - first_step) * a.batch * config.context);
  std::printf("trained %lld steps in %.1f s (evaluations excluded): %.0f tokens/s\n",
              static_cast<long long>(last - first_step), secs, tokens / secs);
  if (a.sample > 0) std::printf("sample:\n%s\n", generate(model, vocab, a).c_str());
  std::printf("val_loss: %.4f\n", val_loss);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory\n";
    return 1;
  } catch (const std::exception& e) { // anything else still ends as one line and a failure, never terminate()
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
